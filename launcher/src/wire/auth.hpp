// wire/auth.hpp — the job secret and the mutual handshake on every agent connection.
//
// docs/design.md §4 "Trust": every job has a fresh 256-bit secret, handed to each
// agent on its launch agent's stdin, and every connection between a parent
// (the controller, or an agent that started others) and a child (an agent)
// proves knowledge of it in both directions before any frame is trusted.
//
// The handshake (version 1).  Both sides send at once, then answer:
//
//   hello  = "ACCRUN1\0" (8 bytes) | role (u8: 1 parent, 2 child) | nonce (32 random bytes)
//   proof  = HMAC-SHA256(secret, "accrun-auth-v1" | prover role | prover nonce | verifier nonce)
//
// Each side sends its hello, reads the peer's hello (checking the magic and
// that the peer claims the other role), sends its proof, reads the peer's
// proof and compares it in constant time with the one it computes.  The
// roles and both nonces in the MAC stop a reflected or replayed proof; a
// proof is only ever sent after the peer's hello was checked.  41 + 32 bytes
// go each way.  Frames (frame.hpp) may follow a side's proof directly.
//
// All crypto is libsodium's (crypto_auth_hmacsha256, randombytes_buf,
// sodium_memcmp); nothing here is hand-written.
//
// Limits: the handshake authenticates the two ends, it does not protect the
// frames that follow (no encryption, no per-frame MAC): someone who can
// rewrite the TCP stream after the handshake is not stopped by it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "accrun/status.hpp"

namespace accrun::wire {

// The job's shared secret: 32 random bytes.  A plain value (copyable); the
// destructor wipes the bytes.  Never put it on a command line or in a rank's
// environment.
struct Secret {
  std::array<uint8_t, 32> bytes{};

  Secret() = default;
  Secret(const Secret&) = default;
  Secret& operator=(const Secret&) = default;
  ~Secret();

  // A fresh secret from libsodium's CSPRNG.  Errors: Code::kSystem when
  // libsodium cannot initialise (no entropy source).
  static Result<Secret> generate();
  // 64 lowercase hex characters, no newline: the line written to an agent's
  // stdin.
  std::string to_hex() const;
  // Parses exactly 64 hex characters (either case); one trailing "\n" or
  // "\r\n" is accepted, so a line read from stdin can be passed as is.
  // Errors: Code::kInvalidArgument for any other length or a non-hex
  // character (the message never echoes the input).
  static Result<Secret> from_hex(std::string_view hex);
};

// Which end of a connection this side is.  The two ends must differ.
enum class Role : uint8_t {
  kParent = 1,  // the job controller, or an agent towards the agents it started
  kChild = 2,   // a node agent towards its parent
};

// Size of the magic, the hello and the proof on the wire.
inline constexpr size_t kHandshakeMagicSize = 8;
inline constexpr size_t kHelloSize = kHandshakeMagicSize + 1 + 32;
inline constexpr size_t kProofSize = 32;

// One side of the handshake as a non-blocking state machine: it never reads
// or writes a file descriptor.  The event loop sends what start() and feed()
// return and feeds what it reads, so a stalled peer blocks nothing; the
// caller applies its own deadline and closes the connection on error.
// Keeps a copy of the secret (wiped on destruction).  Not thread-safe;
// movable, not copyable.
class Handshake {
 public:
  // What to do after feed().
  struct Step {
    std::string send;      // bytes to write to the peer now (may be empty)
    bool done = false;     // the peer proved the secret; the connection is trusted
    std::string leftover;  // when done: bytes that followed the peer's proof in the
                           // fed data — the first frames, for the FrameDecoder
  };

  Handshake(Role role, const Secret& secret);
  Handshake(Handshake&&) noexcept = default;
  Handshake& operator=(Handshake&&) noexcept = default;
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;
  ~Handshake();

  // The hello to send first, before anything is fed.  Call once; a second
  // call is a bug (asserts).  Returns "" if libsodium could not initialise,
  // and the first feed() then reports Code::kSystem.
  std::string start();

  // Consumes `n` bytes received from the peer (any chunking, down to one
  // byte at a time).  Returns the bytes to send next and whether the
  // handshake is complete; bytes after the peer's proof are returned as
  // `leftover` with done.  Errors (Code::kInvalidArgument unless noted; the
  // caller closes the connection and logs the message, which names the
  // failure but never the secret): the peer's magic is wrong (not accrun,
  // or another protocol version); the peer claims this side's role or an
  // unknown one; the peer's proof does not match (wrong secret, replayed or
  // altered proof); data fed after completion (over-long input:
  // Code::kInvalidUsage); feed() before start() (Code::kInvalidUsage).
  // An error is sticky.
  Result<Step> feed(const char* data, size_t n);

  // Bytes still needed from the peer to finish (0 when done or failed).  A
  // blocking reader reads at most this many so it never consumes frames
  // that follow the handshake.
  size_t wanted() const;
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return !error_.is_ok(); }
  Role role() const { return role_; }

 private:
  enum class State { kNew, kWantHello, kWantProof, kDone, kFailed };

  Status fail(Status s);
  std::array<uint8_t, kProofSize> proof(Role prover, const std::array<uint8_t, 32>& prover_nonce,
                                        const std::array<uint8_t, 32>& verifier_nonce) const;

  Role role_;
  Secret secret_;
  State state_ = State::kNew;
  std::array<uint8_t, 32> nonce_{};
  std::array<uint8_t, 32> peer_nonce_{};
  std::string in_;  // the peer's bytes of the current message
  Status error_;
};

// Runs the handshake on a connected stream socket `fd`, waiting with poll()
// until it completes or `timeout` passes.  For the simple case of an agent
// connecting out to its parent; event loops drive Handshake directly.
// Reads exactly the handshake's bytes, so frames the peer sends right after
// its proof stay in the socket for the Connection.  Works whether or not
// `fd` is non-blocking (it uses MSG_DONTWAIT and never changes the fd's
// flags); does not take ownership.  Blocks the calling thread up to
// `timeout`.  Errors: Code::kTimeout (the peer stalled), Code::kRemote (the
// peer closed the connection), Code::kSystem (a socket call failed), and
// the handshake's own errors (Handshake::feed).
Status handshake_blocking(int fd, Role role, const Secret& secret,
                          std::chrono::milliseconds timeout);

}  // namespace accrun::wire
