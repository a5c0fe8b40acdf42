// wire/auth.cpp — job secret and the HMAC-SHA256 challenge-response handshake.
#include "wire/auth.hpp"

#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace accrun::wire {
namespace {

constexpr char kMagic[kHandshakeMagicSize] = {'A', 'C', 'C', 'R', 'U', 'N', '1', '\0'};
constexpr std::string_view kLabel = "accrun-auth-v1";

static_assert(crypto_auth_hmacsha256_BYTES == kProofSize);
static_assert(crypto_auth_hmacsha256_KEYBYTES == sizeof(Secret::bytes));

Status sodium_ready() {
  // Idempotent and thread-safe; fails only without an entropy source.
  if (sodium_init() < 0) return Status(Code::kSystem, "libsodium could not initialise");
  return Status::ok();
}

const char* role_name(Role r) { return r == Role::kParent ? "parent" : "child"; }

}  // namespace

// --- Secret ---

Secret::~Secret() { sodium_memzero(bytes.data(), bytes.size()); }

Result<Secret> Secret::generate() {
  ACCRUN_RETURN_IF_ERROR(sodium_ready());
  Secret s;
  randombytes_buf(s.bytes.data(), s.bytes.size());
  return s;
}

std::string Secret::to_hex() const {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

Result<Secret> Secret::from_hex(std::string_view hex) {
  if (hex.size() >= 1 && hex.back() == '\n') hex.remove_suffix(1);
  if (hex.size() >= 1 && hex.back() == '\r') hex.remove_suffix(1);
  if (hex.size() != 2 * sizeof(Secret::bytes)) {
    return invalid_argument("job secret: expected 64 hex characters, got " +
                            std::to_string(hex.size()));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Secret s;
  for (size_t i = 0; i < s.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return invalid_argument("job secret: non-hex character at position " +
                              std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    s.bytes[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return s;
}

// --- Handshake ---

Handshake::Handshake(Role role, const Secret& secret) : role_(role), secret_(secret) {
  Status ready = sodium_ready();
  if (!ready.is_ok()) {
    (void)fail(std::move(ready));
    return;
  }
  randombytes_buf(nonce_.data(), nonce_.size());
}

Handshake::~Handshake() {
  sodium_memzero(nonce_.data(), nonce_.size());
  sodium_memzero(peer_nonce_.data(), peer_nonce_.size());
}

Status Handshake::fail(Status s) {
  error_ = std::move(s);
  state_ = State::kFailed;
  in_.clear();
  return error_;
}

std::string Handshake::start() {
  if (state_ == State::kFailed) return {};
  assert(state_ == State::kNew && "Handshake::start called twice");
  std::string hello(kMagic, kHandshakeMagicSize);
  hello.push_back(static_cast<char>(role_));
  hello.append(reinterpret_cast<const char*>(nonce_.data()), nonce_.size());
  state_ = State::kWantHello;
  return hello;
}

std::array<uint8_t, kProofSize> Handshake::proof(Role prover,
                                                 const std::array<uint8_t, 32>& prover_nonce,
                                                 const std::array<uint8_t, 32>& verifier_nonce) const {
  std::array<uint8_t, kProofSize> mac{};
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, secret_.bytes.data(), secret_.bytes.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(kLabel.data()),
                                kLabel.size());
  const auto role_byte = static_cast<unsigned char>(prover);
  crypto_auth_hmacsha256_update(&st, &role_byte, 1);
  crypto_auth_hmacsha256_update(&st, prover_nonce.data(), prover_nonce.size());
  crypto_auth_hmacsha256_update(&st, verifier_nonce.data(), verifier_nonce.size());
  crypto_auth_hmacsha256_final(&st, mac.data());
  sodium_memzero(&st, sizeof st);
  return mac;
}

size_t Handshake::wanted() const {
  switch (state_) {
    case State::kNew:
    case State::kWantHello: return kHelloSize - in_.size();
    case State::kWantProof: return kProofSize - in_.size();
    case State::kDone:
    case State::kFailed: return 0;
  }
  return 0;
}

Result<Handshake::Step> Handshake::feed(const char* data, size_t n) {
  if (state_ == State::kFailed) return error_;
  if (state_ == State::kNew) {
    return fail(invalid_usage("handshake: data fed before start()"));
  }
  if (state_ == State::kDone) {
    return fail(invalid_usage("handshake: " + std::to_string(n) +
                              " bytes fed after the handshake completed"));
  }
  Step step;
  size_t i = 0;
  while (i < n && state_ != State::kDone) {
    const size_t take = std::min(wanted(), n - i);
    const size_t before = in_.size();
    in_.append(data + i, take);
    i += take;
    if (state_ == State::kWantHello) {
      // Check the magic as it arrives, so a stray client (an HTTP probe, a
      // port scanner) is turned away at its first wrong byte.
      const size_t magic_end = std::min(in_.size(), kHandshakeMagicSize);
      if (before < magic_end &&
          std::memcmp(in_.data() + before, kMagic + before, magic_end - before) != 0) {
        return fail(invalid_argument(
            "handshake: peer is not an accrun agent of this protocol version (bad magic)"));
      }
      if (in_.size() < kHelloSize) continue;
      const auto peer_role = static_cast<uint8_t>(in_[kHandshakeMagicSize]);
      if (peer_role != static_cast<uint8_t>(Role::kParent) &&
          peer_role != static_cast<uint8_t>(Role::kChild)) {
        return fail(invalid_argument("handshake: peer claims unknown role " +
                                     std::to_string(peer_role)));
      }
      if (peer_role == static_cast<uint8_t>(role_)) {
        return fail(invalid_argument(std::string("handshake: peer claims this side's role (") +
                                     role_name(role_) + "); expected the other end"));
      }
      std::memcpy(peer_nonce_.data(), in_.data() + kHandshakeMagicSize + 1, peer_nonce_.size());
      if (sodium_memcmp(peer_nonce_.data(), nonce_.data(), nonce_.size()) == 0) {
        // Our own hello reflected back with the role byte changed.
        return fail(invalid_argument("handshake: peer echoed this side's nonce"));
      }
      const auto mine = proof(role_, nonce_, peer_nonce_);
      step.send.append(reinterpret_cast<const char*>(mine.data()), mine.size());
      in_.clear();
      state_ = State::kWantProof;
    } else if (state_ == State::kWantProof) {
      if (in_.size() < kProofSize) continue;
      const Role peer = role_ == Role::kParent ? Role::kChild : Role::kParent;
      const auto expected = proof(peer, peer_nonce_, nonce_);
      const bool ok = sodium_memcmp(expected.data(), in_.data(), kProofSize) == 0;
      in_.clear();
      if (!ok) {
        return fail(invalid_argument(std::string("handshake: the ") + role_name(peer) +
                                     " failed to prove the job secret (wrong secret, or a "
                                     "replayed or altered proof)"));
      }
      state_ = State::kDone;
    }
  }
  if (state_ == State::kDone) {
    step.done = true;
    step.leftover.assign(data + i, n - i);
  }
  return step;
}

// --- blocking helper ---

Status handshake_blocking(int fd, Role role, const Secret& secret,
                          std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  Handshake hs(role, secret);
  std::string out = hs.start();
  if (out.empty()) return hs.feed(nullptr, 0).status();
  size_t out_off = 0;

  char buf[kHelloSize];
  while (!hs.done() || out_off < out.size()) {
    // Send what is pending before waiting to read.
    while (out_off < out.size()) {
      const ssize_t w =
          ::send(fd, out.data() + out_off, out.size() - out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w >= 0) {
        out_off += static_cast<size_t>(w);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return system_error("handshake: send");
    }
    if (hs.done() && out_off == out.size()) break;

    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return timeout_error("handshake: peer did not complete the handshake within " +
                           std::to_string(timeout.count()) + " ms");
    }
    pollfd pfd{fd, 0, 0};
    if (!hs.done()) pfd.events |= POLLIN;
    if (out_off < out.size()) pfd.events |= POLLOUT;
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (pr < 0) {
      if (errno == EINTR) continue;
      return system_error("handshake: poll");
    }
    if (pr == 0) continue;  // the deadline check above reports the timeout
    if (pfd.revents & POLLNVAL) return Status(Code::kSystem, "handshake: fd is not open");
    // POLLERR and POLLHUP fall through to send/recv, which report them precisely.
    if (hs.done()) continue;
    // Read no more than the handshake needs: what follows belongs to the
    // connection's frame decoder.
    const ssize_t r = ::recv(fd, buf, std::min(hs.wanted(), sizeof buf), MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return system_error("handshake: recv");
    }
    if (r == 0) return remote_error("handshake: peer closed the connection during the handshake");
    auto step = hs.feed(buf, static_cast<size_t>(r));
    if (!step) return step.status();
    out += step->send;
    assert(step->leftover.empty());
  }
  return Status::ok();
}

}  // namespace accrun::wire
