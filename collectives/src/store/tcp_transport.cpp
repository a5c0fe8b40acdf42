// Plain TCP between the members of a store group (tcp_transport.hpp).
#include "store/tcp_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "accrun/accept_pause.hpp"
#include "accrun/log.hpp"
#include "accrun/tcp_congestion.hpp"
#include "store/tcp_counts.hpp"
#include "store/wait.hpp"

namespace accrun::collectives::store {
namespace {

constexpr std::uint32_t kFrameMagic = 0x41435354;  // "ACST"
constexpr std::uint32_t kHelloMagic = 0x41434848;  // "ACHH"
constexpr std::size_t kHeadBytes = 16;             // magic, tag and number, length
// The frame's second word: its tag in the low byte, and above it the
// message's number on its link (counted from 0, modulo 2^24), which the
// receiver checks, so a message lost or duplicated on the way fails the
// link at once instead of leaving a receive waiting.
constexpr std::uint32_t kTagBits = 8;
constexpr std::uint32_t kNumberMask = (1u << (32 - kTagBits)) - 1;
constexpr std::size_t kHelloBytes = 24;            // magic, rank, token
// A send of more than this left after the socket filled keeps streaming
// from the caller's buffer while the socket drains within kStreamStall.
constexpr std::size_t kStreamMin = 256 * 1024;
constexpr timespec kStreamStall{0, 1'000'000};  // 1 ms

std::string hex(const unsigned char* p, std::size_t n) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

bool unhex(const std::string& s, unsigned char* p, std::size_t n) {
  if (s.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    p[i] = static_cast<unsigned char>(v);
  }
  return true;
}

bool same_token(const unsigned char* a, const unsigned char* b) {
  unsigned char diff = 0;
  for (int i = 0; i < 16; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// This host's IPv4 addresses that peers may reach: up, not loopback
// (loopback only when there is nothing else).
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      char b[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, b, sizeof b);
      out.emplace_back(b);
    }
    freeifaddrs(ifs);
  }
  if (out.empty()) out.emplace_back("127.0.0.1");
  return out;
}

int remaining_ms(const Wait& w, int cap) {
  if (w.deadline == Clock::time_point::max()) return cap;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, std::min<long long>(left, cap)));
}

void put32(unsigned char* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
void put64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string endpoint(const sockaddr_in& a) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, b, sizeof b);
  return std::string(b) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace

TcpTransport::Socket TcpTransport::Socket::of(int fd) {
  Socket s;
  struct stat st {};
  if (::fstat(fd, &st) == 0) s.inode = st.st_ino;
  sockaddr_in me{}, peer{};
  socklen_t me_len = sizeof me, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &me_len) == 0 &&
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 && me.sin_family == AF_INET &&
      peer.sin_family == AF_INET)
    s.ends = endpoint(me) + " to " + endpoint(peer);
  return s;
}

// The kernel's count of bytes taken to send on fd (0 where it does not tell).
static std::uint64_t kernel_out(int fd) {
  TcpCounts k;
  return tcp_counts(fd, &k) ? k.acked + k.unacked : 0;
}

std::string TcpTransport::reused(int fd, const Socket& was) {
  const Socket now = Socket::of(fd);
  if (now.inode == was.inode && now.ends == was.ends) return "";
  return "; its descriptor " + std::to_string(fd) + " no longer names that connection but " +
         (now.ends.empty() ? "another file" : "connection " + now.ends) +
         ": something else in this process closed it and opened another";
}

// The untagged Channel of transport.hpp: the program's messages (tag 0).
class TcpTransport::TaggedChannel final : public Channel {
 public:
  TaggedChannel(TcpTransport* t, int peer) : t_(t), peer_(peer) {}
  Status send(const void* data, std::size_t len, const Wait& w) override {
    return t_->send(peer_, kP2p, data, len, w);
  }
  Status recv(void* data, std::size_t max_len, const Wait& w) override {
    std::size_t got = 0;
    return t_->recv(peer_, kP2p, data, max_len, &got, w);
  }

 private:
  TcpTransport* t_;
  int peer_;
};

TcpTransport::TcpTransport(const GroupContext& ctx, std::vector<bool> needs,
                           std::size_t pair_buffer_max)
    : name_(ctx.name),
      rank_(ctx.rank),
      members_(ctx.members),
      needs_(std::move(needs)),
      rendezvous_(ctx.rendezvous),
      peers_(ctx.peers),
      pair_buffer_max_(pair_buffer_max),
      memory_bytes_(host_memory_bytes()),
      congestion_(ctx.tcp_congestion),
      spin_(!host_oversubscribed(ctx)),
      links_(ctx.members.size()) {
  for (std::size_t q = 0; q < members_.size(); ++q) {
    channels_.push_back(needs_[q] ? std::make_unique<TaggedChannel>(this, static_cast<int>(q)) : nullptr);
  }
}

void TcpTransport::leaving() {
  (void)rendezvous_->publish("tcp.left." + std::to_string(rank_), "1");
}

TcpTransport::~TcpTransport() {
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(out_mu_);
      stop_ = true;
    }
    wake_writer();
    writer_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  // Connections not looked at yet: their hellos read (so they end with a
  // close, not a reset), then closed with the links.
  if (listen_fd_ >= 0) accept_all();
  for (Pending& p : pending_)
    if (!take_hello(p)) ::close(p.fd);
  for (Link& l : links_) {
    // Bytes left unread at close make the kernel reset the connection, and
    // a reset throws away what this side still had on its way (why this
    // member gave up, sent just before): what is there is read first.
    if (l.in_fd >= 0) {
      char sink[65536];
      for (int i = 0; i < 64 && ::recv(l.in_fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
      }
    }
    if (l.out_fd >= 0) ::close(l.out_fd);
    if (l.in_fd >= 0 && l.in_fd != l.out_fd) ::close(l.in_fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Result<std::unique_ptr<TcpTransport>> TcpTransport::create(const GroupContext& ctx, std::vector<bool> needs,
                                                           std::size_t pair_buffer_max) {
  std::unique_ptr<TcpTransport> t(new TcpTransport(ctx, std::move(needs), pair_buffer_max));
  ACCRUN_RETURN_IF_ERROR(t->listen_and_publish());
  t->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wake_fd_ < 0) return Status(Code::kSystem, "group '" + t->name_ + "': TCP transport: eventfd: " + std::strerror(errno));
  TcpTransport* raw = t.get();
  t->writer_ = std::thread([raw] { raw->write_loop(); });
  return t;
}

bool TcpTransport::reaches(int peer) const {
  return peer >= 0 && static_cast<std::size_t>(peer) < needs_.size() && needs_[static_cast<std::size_t>(peer)];
}

Channel* TcpTransport::channel(int peer) { return reaches(peer) ? channels_[static_cast<std::size_t>(peer)].get() : nullptr; }

std::string TcpTransport::describe(int peer) const { return describe_member(members_, peer); }

Status TcpTransport::listen_and_publish() {
  const std::string where = "group '" + name_ + "': TCP transport";
  if (getrandom(token_, sizeof token_, 0) != static_cast<ssize_t>(sizeof token_))
    return Status(Code::kSystem, where + ": getrandom: " + std::strerror(errno));
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status(Code::kSystem, where + ": socket: " + std::strerror(errno));
  // The congestion control every connection of this member uses (accepted
  // ones inherit the listener's; tcp_congestion.hpp says why Reno).
  if (congestion_.empty()) {
    congestion_ = kDefaultTcpCongestion;
    if (set_tcp_congestion(listen_fd_, congestion_) != 0) congestion_ = kSystemTcpCongestion;
  } else if (const int e = set_tcp_congestion(listen_fd_, congestion_); e != 0) {
    const std::string host = members_[static_cast<std::size_t>(rank_)].host;
    const std::string why = e == ENOENT ? " does not have it (/proc/sys/net/ipv4/tcp_available_congestion_control"
                                          " lists what it has)"
                            : e == EPERM ? " allows it to privileged users only (/proc/sys/net/ipv4/"
                                           "tcp_allowed_congestion_control lists what it allows)"
                                         : " refuses it (" + std::string(std::strerror(e)) + ")";
    return invalid_argument(where + ": ACCRUN_STORE_TCP_CONGESTION='" + congestion_ + "': host " + host + why +
                            "; name another one, or system for the host's default");
  }
  log(LogLevel::kDebug, "group '%s': TCP transport: congestion control %s", name_.c_str(), congestion_.c_str());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t alen = sizeof a;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    return Status(Code::kSystem, where + ": listening: " + std::strerror(errno));
  }
  std::string ips;
  for (const std::string& ip : local_addresses()) ips += (ips.empty() ? "" : ",") + ip;
  const std::string value = std::to_string(ntohs(a.sin_port)) + " " + ips + " " + hex(token_, sizeof token_);
  return rendezvous_->publish("tcp.addr." + std::to_string(rank_), value);
}

Status TcpTransport::connect_to(int peer, const Wait& w) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  if (l.out_fd >= 0) return Status::ok();
  if (l.in_fd >= 0 && !l.in_ours) {
    // The peer connected first: its connection carries our messages too,
    // and each message's acknowledgement rides on the answer.
    std::lock_guard<std::mutex> lock(out_mu_);
    l.out_fd = l.in_fd;
    l.out_sock = l.in_sock;
    l.out_bytes = 0;
    l.out_base = kernel_out(l.out_fd);
    return Status::ok();
  }
  const std::string where = "group '" + name_ + "': " + w.op + ": connecting to " + describe(peer);
  if (l.address.empty()) {
    Result<std::string> v = lookup_published(rendezvous_, "tcp.addr." + std::to_string(peer), peers_, members_, peer, w);
    if (!v.is_ok()) return v.status().with_context(where + ": its address was never published");
    l.address = *v;
  }
  std::istringstream in(l.address);
  int port = 0;
  std::string ips, token_hex;
  unsigned char token[16];
  if (!(in >> port >> ips >> token_hex) || port <= 0 || port > 65535 || !unhex(token_hex, token, sizeof token))
    return Status(Code::kSystem, where + ": malformed address '" + l.address + "'");
  std::string tried;
  std::stringstream list(ips);
  for (std::string ip; std::getline(list, ip, ',');) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status(Code::kSystem, where + ": socket: " + std::strerror(errno));
    (void)set_tcp_congestion(fd, congestion_);  // the listener took it: so does this host
    int err = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int n = ::poll(&p, 1, remaining_ms(w, 3000));
        socklen_t el = sizeof err;
        err = n == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 ? err : ETIMEDOUT;
      }
    }
    if (err != 0) {
      tried += (tried.empty() ? "" : ", ") + ip + ":" + std::to_string(port) + " (" + std::strerror(err) + ")";
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    unsigned char hello[kHelloBytes];
    put32(hello, kHelloMagic);
    put32(hello + 4, static_cast<std::uint32_t>(rank_));
    std::memcpy(hello + 8, token, 16);
    std::lock_guard<std::mutex> lock(out_mu_);
    l.out_fd = fd;
    l.out_sock = Socket::of(fd);
    l.out_bytes = 0;
    l.out_base = kernel_out(fd);
    if (l.in_fd < 0) {  // the peer may answer on it
      l.in_fd = fd;
      l.in_sock = l.out_sock;
      l.in_bytes = 0;
      l.in_ours = true;
    }
    l.outq.emplace_front();  // goes first
    l.outq.front().own.assign(reinterpret_cast<const char*>(hello), sizeof hello);
    l.queued += sizeof hello;
    write_link_locked(peer);
    if (l.queued > 0) wake_writer();
    return Status::ok();
  }
  return remote_error(where + ": no address answered: " + tried);
}

Status TcpTransport::send(int peer, Tag tag, const void* data, std::size_t len, const Wait& w) {
  return enqueue(peer, tag, nullptr, 0, data, len, w, false);
}

Status TcpTransport::send2(int peer, Tag tag, const void* head, std::size_t head_len, const void* data,
                           std::size_t len, const Wait& w, bool borrow) {
  return enqueue(peer, tag, head, head_len, data, len, w, borrow);
}

void TcpTransport::unborrow() {
  std::lock_guard<std::mutex> lock(out_mu_);
  for (Link& l : links_) {
    for (Link::Chunk& c : l.outq) {
      if (c.borrowed == nullptr) continue;
      c.own.assign(c.borrowed, c.borrowed_len);
      c.borrowed = nullptr;
      c.borrowed_len = 0;
    }
  }
}

// While its bytes move, a flush reads no link that has no posted receive:
// what comes on one is the peer's next message, sent before this member
// asked for it (the host before it in a broadcast's chain, already in the
// next call).  Left in the socket, it goes straight to the receive posted
// for it later; read now, it would go to storage of the transport's own and
// be copied from there, costing the host a pass over memory more, at a time
// the host's CPUs move this flush's bytes.  A flush whose sends stand still
// for kHoldStill reads everything again (wait_for): the peer may be waiting
// for this member to read before it reads (each flushing to the other).
// (Sends stand still for milliseconds anyway while a receiver copies tens
// of MiB out of its socket in one read, before it opens its window.)
class TcpTransport::Holding {
 public:
  explicit Holding(TcpTransport& t) : t_(t) { t_.holding_ = true; }
  ~Holding() { t_.holding_ = false; }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;

 private:
  TcpTransport& t_;
};

std::uint64_t TcpTransport::bytes_out() const {
  std::lock_guard<std::mutex> g(out_mu_);
  std::uint64_t n = 0;
  for (const Link& l : links_) n += l.out_bytes;
  return n;
}

Status TcpTransport::flush_link(int peer, const Wait& w) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  const Holding hold(*this);
  ACCRUN_RETURN_IF_ERROR(wait_for(
      [&] {
        std::lock_guard<std::mutex> g(out_mu_);
        return l.queued == 0 || !l.lost.empty();
      },
      peer, w, "its messages to be sent"));
  return unsent(peer, w);
}

Status TcpTransport::unsent(int peer, const Wait& w) {
  std::lock_guard<std::mutex> g(out_mu_);
  const Link& l = links_[static_cast<std::size_t>(peer)];
  if (l.lost.empty() || l.dropped == 0) return Status::ok();
  return remote_error("group '" + name_ + "': " + w.op + ": " + describe(peer) + " " + l.lost + "; " +
                      std::to_string(l.dropped) + " bytes queued for it were never sent");
}

Status TcpTransport::enqueue(int peer, Tag tag, const void* head, std::size_t head_len, const void* data,
                             std::size_t len, const Wait& w, bool borrow) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  if (std::string why = lost(peer); !why.empty())
    return remote_error("group '" + name_ + "': " + w.op + ": " + describe(peer) + " " + why);
  ACCRUN_RETURN_IF_ERROR(connect_to(peer, w));
  std::unique_lock<std::mutex> lock(out_mu_);
  unsigned char frame[kHeadBytes];
  put32(frame, kFrameMagic);
  put32(frame + 4, tag | static_cast<std::uint32_t>((l.out_msgs & kNumberMask) << kTagBits));
  ++l.out_msgs;
  put64(frame + 8, head_len + len);
  std::size_t sent = 0;
  const std::size_t total = kHeadBytes + head_len + len;
  if (l.outq.empty()) {
    const iovec whole[3] = {{frame, kHeadBytes}, {const_cast<void*>(head), head_len}, {const_cast<void*>(data), len}};
    auto send_from = [&](std::size_t from) -> ssize_t {  // the frame's bytes from `from` on
      iovec iov[3];
      int k = 0;
      for (const iovec& v : whole) {
        if (from >= v.iov_len) {
          from -= v.iov_len;
          continue;
        }
        iov[k++] = {static_cast<char*>(v.iov_base) + from, v.iov_len - from};
        from = 0;
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<std::size_t>(k);
      return ::sendmsg(l.out_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    };
    for (;;) {
      const ssize_t n = send_from(sent);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        l.out_bytes += static_cast<std::size_t>(n);
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (n < 0) lose_locked(peer, std::string("broke the connection (") + std::strerror(errno) + ")");
        break;
      }
      // A large message to a peer that is reading streams from the caller's
      // buffer; only once the socket stays full (the peer does something
      // else) is the rest copied, so the send still never waits for its
      // receive.
      if (sent == total || borrow || total - sent < kStreamMin || !l.lost.empty()) break;
      pollfd p{l.out_fd, POLLOUT, 0};
      lock.unlock();
      const int ready = ::ppoll(&p, 1, &kStreamStall, nullptr);
      lock.lock();
      if (ready <= 0) break;
    }
    if (!l.lost.empty()) {
      const std::string why = l.lost;
      lock.unlock();
      return remote_error("group '" + name_ + "': " + w.op + ": " + describe(peer) + " " + why);
    }
  }
  std::size_t mine = 0;  // bytes of this message left queued
  if (sent < total) {
    std::string rest;
    auto add = [&](const void* p, std::size_t n, std::size_t base) {
      if (sent < base + n && n > 0) {
        const std::size_t from = sent > base ? sent - base : 0;
        rest.append(static_cast<const char*>(p) + from, n - from);
      }
    };
    add(frame, kHeadBytes, 0);
    add(head, head_len, kHeadBytes);
    const std::size_t data_base = kHeadBytes + head_len;
    if (!borrow || len == 0) add(data, len, data_base);
    if (!rest.empty()) {
      mine += rest.size();
      l.queued += rest.size();
      l.outq.emplace_back();
      l.outq.back().own = std::move(rest);
    }
    if (borrow && len > 0) {
      const std::size_t from = sent > data_base ? sent - data_base : 0;
      l.outq.emplace_back();
      l.outq.back().borrowed = static_cast<const char*>(data) + from;
      l.outq.back().borrowed_len = len - from;
      mine += len - from;
      l.queued += len - from;
    }
    wake_writer();  // the writer thread sends the rest, whatever this thread does next
  }
  if (l.queued > pair_buffer_max_) {
    // Past the bound, wait until the peer has taken enough: the messages
    // queued before this one, where this one alone is larger than the
    // bound (it goes alone; the queue drains in order).
    lock.unlock();
    ACCRUN_RETURN_IF_ERROR(wait_for(
        [&] {
          std::lock_guard<std::mutex> g(out_mu_);
          return l.queued <= pair_buffer_max_ || l.queued <= mine || !l.lost.empty();
        },
        peer, w, "the peer to take buffered messages"));
    return unsent(peer, w);
  }
  return Status::ok();
}

Status TcpTransport::recv(int peer, Tag tag, void* data, std::size_t max_len, std::size_t* got, const Wait& w) {
  std::string whole;
  bool placed = false;
  std::size_t length = 0;
  ACCRUN_RETURN_IF_ERROR(
      receive_posted(peer, tag, 0, static_cast<char*>(data), max_len, true, &whole, &placed, &length, w));
  if (!placed) {
    if (whole.size() > max_len) {
      // The message stays queued, first of its tag, for a larger receive.
      Link& l = links_[static_cast<std::size_t>(peer)];
      const std::size_t n = whole.size();
      l.inbox.push_front(Message{tag, std::move(whole), false, n});
      l.inbox_bytes += charge(l.inbox.front());
      return invalid_argument("group '" + name_ + "': " + w.op + ": the message from " + describe(peer) + " has " +
                              std::to_string(n) + " bytes, more than the " + std::to_string(max_len) +
                              " the receive buffer holds (it stays queued)");
    }
    if (!whole.empty()) std::memcpy(data, whole.data(), whole.size());
    length = whole.size();
    recycle(std::move(whole));
  }
  *got = length;
  return Status::ok();
}

Status TcpTransport::recv_message(int peer, Tag tag, std::string* out, const Wait& w) {
  // Posted with no buffer of its own, so that reading stops at its message.
  bool placed = false;
  std::size_t length = 0;
  return receive_posted(peer, tag, 0, nullptr, 0, false, out, &placed, &length, w);
}

// A split's message that came whole before its receive was posted: its
// data goes to `dest` now, and its storage to spares_.
void TcpTransport::place_split(std::string* head, bool* placed, char* dest, std::size_t keep, std::size_t len) {
  if (*placed || head->size() != keep + len) return;
  std::memcpy(dest, head->data() + keep, len);
  *placed = true;
  if (head->capacity() <= kStageBytes) {
    head->resize(keep);
    return;
  }
  std::string kept(head->data(), keep);
  recycle(std::move(*head));
  *head = std::move(kept);
}

void TcpTransport::recycle(std::string&& bytes) {
  if (bytes.capacity() <= kStageBytes) return;
  const auto at = std::find_if(spares_.begin(), spares_.end(), [&](const std::string& s) {
    return s.capacity() < bytes.capacity();
  });
  spares_.insert(at, std::move(bytes));
  // The largest stays; the others while they fit the bounds.
  std::size_t others = 0, i = 1;
  for (; i < spares_.size() && i <= kSpares; ++i) {
    if (others + spares_[i].capacity() > kSpareBytes) break;
    others += spares_[i].capacity();
  }
  spares_.resize(std::min(i, spares_.size()));
}

std::string TcpTransport::storage(std::size_t keep) {
  std::string s;
  if (keep > kStageBytes) {
    // The smallest spare that holds it.  A spare keeps the size of its last
    // message: shrinking to this one's writes nothing, and growing fills
    // only the rest.
    for (std::size_t i = spares_.size(); i-- > 0;) {
      if (spares_[i].capacity() < keep) continue;
      s = std::move(spares_[i]);
      spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
      s.resize(keep);
      return s;
    }
  }
  s.assign(keep, '\0');
  return s;
}

Status TcpTransport::recv_split(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len,
                                std::string* head, bool* placed, const Wait& w) {
  std::size_t length = 0;
  ACCRUN_RETURN_IF_ERROR(receive_posted(peer, tag, keep, dest, len, false, head, placed, &length, w));
  place_split(head, placed, dest, keep, len);
  return Status::ok();
}

Status TcpTransport::receive_posted(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, bool up_to,
                                    std::string* head, bool* placed, std::size_t* length, const Wait& w) {
  links_[static_cast<std::size_t>(peer)].post = Link::Post{true, false, tag, keep, dest, len, up_to};
  return take_posted(peer, tag, head, placed, length, w);
}

Status TcpTransport::recv_splits(std::vector<Split>* splits, const Wait& w) {
  std::vector<bool> seen(links_.size());
  for (const Split& s : *splits) {
    if (seen[static_cast<std::size_t>(s.peer)]) return HostLinks::recv_splits(splits, w);  // one post per link
    seen[static_cast<std::size_t>(s.peer)] = true;
  }
  for (const Split& s : *splits)
    links_[static_cast<std::size_t>(s.peer)].post = Link::Post{true, false, s.tag, s.keep, s.dest, s.len, false};
  for (std::size_t i = 0; i < splits->size(); ++i) {
    Split& s = (*splits)[i];
    std::size_t length = 0;
    Status st = take_posted(s.peer, s.tag, &s.head, &s.placed, &length, w);
    if (!st.is_ok()) {
      for (std::size_t j = i + 1; j < splits->size(); ++j) unpost((*splits)[j].peer);
      return st;
    }
    place_split(&s.head, &s.placed, s.dest, s.keep, s.len);
  }
  return Status::ok();
}

// Waits for the message the link's posted receive is for, and takes it.
Status TcpTransport::take_posted(int peer, Tag tag, std::string* head, bool* placed, std::size_t* length,
                                 const Wait& w) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  auto find = [&] {
    return std::find_if(l.inbox.begin(), l.inbox.end(), [&](const Message& m) { return m.tag == tag; });
  };
  Status st = wait_for([&] { return find() != l.inbox.end(); }, peer, w, "a message", tag == kCollective);
  if (!st.is_ok()) {
    unpost(peer);
    return st;
  }
  l.post = Link::Post{};
  auto it = find();
  l.inbox_bytes -= charge(*it);
  *placed = it->placed;
  *length = it->length;
  *head = std::move(it->bytes);
  l.inbox.erase(it);
  return Status::ok();
}

// Withdraws the link's posted receive, its caller giving up.  A message
// still arriving into the receive's buffer goes on in a buffer of the
// transport's own, and one already placed there is made whole again: a
// later receive gets either whole.
void TcpTransport::unpost(int peer) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  const Link::Post po = l.post;
  l.post = Link::Post{};
  if (!po.matched) return;
  if (l.in_body && l.direct == po.dest) {
    l.spill.assign(l.body_total - l.body_keep, '\0');
    if (l.body_got > l.body_keep) std::memcpy(l.spill.data(), po.dest, l.body_got - l.body_keep);
    l.direct = l.spill.data();
    return;
  }
  for (Message& m : l.inbox) {
    if (m.placed && m.tag == po.tag) {
      l.inbox_bytes += m.length - m.bytes.size();
      m.bytes.append(po.dest, m.length - m.bytes.size());
      m.placed = false;
      break;
    }
  }
}

std::size_t TcpTransport::buffered(int peer) const {
  const Link& l = links_[static_cast<std::size_t>(peer)];
  std::size_t n = l.stage_end - l.stage_at + l.body.size() + l.spill.size();
  for (const Message& m : l.inbox) n += m.bytes.size();
  return n;
}

Status TcpTransport::flush(const Wait& w) {
  const Holding hold(*this);
  ACCRUN_RETURN_IF_ERROR(wait_for(
      [&] {
        std::lock_guard<std::mutex> g(out_mu_);
        for (const Link& l : links_) {
          if (l.queued > 0 && l.lost.empty()) return false;
        }
        return true;
      },
      -1, w, "buffered messages to be sent"));
  for (std::size_t q = 0; q < links_.size(); ++q) ACCRUN_RETURN_IF_ERROR(unsent(static_cast<int>(q), w));
  return Status::ok();
}

template <class Ready>
Status TcpTransport::wait_for(Ready ready, int peer, const Wait& w, const char* what, bool watch_all) {
  if (ready()) return Status::ok();  // (most waits of a small call: before reading the clock)
  const auto start = Clock::now();
  auto next_check = start + kPeerCheck, next_left_look = start;
  // The spin's window starts again whenever bytes of the awaited link come
  // in: a large message streams in for milliseconds.
  auto spun_from = start;
  std::uint64_t seen = peer >= 0 ? links_[static_cast<std::size_t>(peer)].in_bytes : 0;
  watch_all = watch_all || w.watch_members;
  std::uint64_t sent = holding_ ? bytes_out() : 0;
  auto moved = start;  // when they last did
  for (;;) {
    if (ready()) return Status::ok();
    const auto now = Clock::now();
    if (peer >= 0 && links_[static_cast<std::size_t>(peer)].in_bytes != seen) {
      seen = links_[static_cast<std::size_t>(peer)].in_bytes;
      spun_from = now;
    }
    if (now >= next_check) {
      next_check = now + kPeerCheck;
      if (holding_) {  // (a flush's: Holding)
        const std::uint64_t out = bytes_out();
        if (out != sent) moved = now;
        sent = out;
        if (now - moved >= kHoldStill) holding_ = false;
      }
      // (The looks below, at what peers left behind, read every link.)
      const bool held = std::exchange(holding_, false);
      if ((peer >= 0 || watch_all) && peers_ != nullptr) {
        for (std::size_t q = 0; q < members_.size(); ++q) {
          if (static_cast<int>(q) != peer && (!watch_all || static_cast<int>(q) == rank_)) continue;
          // The awaited peer: also a process of this host that is gone.
          // Any other member: only a failure the job reported (one that
          // finished its part and exited normally is no failure).
          const int job_rank = members_[q].job_rank;
          if (auto f = static_cast<int>(q) == peer ? peers_->failure(job_rank)
                                                   : peers_->reported_failure(job_rank)) {
            // What it sent before it went may already be here: read
            // what the sockets hold before calling it lost.
            for (int i = 0; i < 16 && !ready(); ++i) progress(0);
            if (ready()) return Status::ok();
            return remote_error("group '" + name_ + "': " + w.op + ": " +
                                describe(static_cast<int>(q)) + " failed: " + *f);
          }
        }
      }
      if (peer >= 0) {
        if (std::string why = lost(peer); !why.empty()) {
          // Lost on the writer's side: the message may be whole in the socket.
          for (int i = 0; i < 16 && !ready(); ++i) progress(0);
          if (ready()) return Status::ok();
          return remote_error("group '" + name_ + "': " + w.op + ": " + describe(peer) + " " + why);
        }
        // A peer that never connected can leave without a word on any
        // socket: after a second, and then every second, look whether it
        // said so in the group's directory (leaving()).
        if (links_[static_cast<std::size_t>(peer)].in_fd < 0 && now - start >= std::chrono::seconds(1) &&
            now >= next_left_look) {
          next_left_look = now + std::chrono::seconds(1);
          if (rendezvous_->lookup("tcp.left." + std::to_string(peer), 0).is_ok()) {
            for (int i = 0; i < 16 && !ready(); ++i) progress(0);  // a connection it made before it left
            if (ready()) return Status::ok();
            // (A connection not yet told apart may be its: look again later.)
            if (links_[static_cast<std::size_t>(peer)].in_fd < 0 && pending_.empty())
              return remote_error("group '" + name_ + "': " + w.op + ": " + describe(peer) +
                                  " destroyed its group and left without sending what this call waits for");
          }
        }
      }
      if (w.also) {
        if (Status s = w.also(); !s) return ready() ? Status::ok() : s;
      }
      if (now >= w.deadline) {
        // What is in the sockets already (a connection still to be
        // accepted, its hello, then its message) is read before the wait
        // is called out: a wait of no time at all (why a send failed) or
        // one whose thread lost the CPU for longer than it had left may
        // have looked only once.
        for (int i = 0; i < 16 && !ready(); ++i) progress(0);
        if (ready()) return Status::ok();
        return timeout_error("group '" + name_ + "': " + w.op + ": waited " + std::to_string(w.timeout_ms) +
                             " ms for " + what +
                             (peer >= 0 ? " from " + describe(peer) + " (" + link_state(peer) + ")" : std::string()));
      }
      holding_ = held;
    }
    // Non-blocking looks until 200 µs pass without bytes from the awaited
    // peer (spun_from; an answer between hosts is often tens of
    // microseconds away), then block in poll, 50 ms at most between the
    // checks above.  Where the host is oversubscribed, a look
    // and a yield of the CPU by turns for the first 10 ms instead (a short
    // call's): a rank that spins keeps the CPU from the ranks it waits for,
    // and one that blocks comes back through a wake-up that costs more,
    // there, than its turn among the runnable ranks.
    if (!spin_ && w.sleep) {
      // A long call's wait (Wait::sleep): poll until a socket is ready,
      // a millisecond at most, so the checks above keep their pace.
      progress(remaining_ms(w, 1));
    } else if (!spin_ && now - start < std::chrono::milliseconds(10)) {
      look(peer);
      sched_yield();
    } else if (spin_ && now - spun_from < std::chrono::microseconds(200)) {
      if (w.look_gap.count() > 0) {  // (a broadcast's reader: Tuning::across_reader_gap_ns)
        const auto until = now + w.look_gap;
        while (Clock::now() < until) ACCRUN_CPU_RELAX();
      }
      look(peer);
    } else {
      progress(remaining_ms(w, holding_ ? 1 : 50));  // (holding: to the next check)
    }
  }
}

// One look between turns of a short wait: a recv on the awaited link costs
// less than a poll of every socket; the others (and the listener) are looked
// at every 16th turn, counted across calls.
void TcpTransport::look(int peer) {
  ++looks_;
  const Link& l = links_[static_cast<std::size_t>(std::max(peer, 0))];
  if (peer >= 0 && l.in_fd >= 0 && !l.in_closed && (++spin_turn_ & 15) != 0) {
    read_link(peer);
  } else {
    progress(0);
  }
}

void TcpTransport::progress(int timeout_ms) {
  std::vector<pollfd>& fds = poll_fds_;
  // who: >= 0 a link's incoming side; -1 the listener; -2 - i pending i;
  // kOut + q link q's outgoing side (this thread writes too while it waits,
  // rather than leave it all to the writer thread)
  constexpr int kOut = 1 << 24;
  std::vector<int>& who = poll_who_;
  fds.clear();
  who.clear();
  expire_pending();
  if (accept_pause_.listening()) {
    fds.push_back({listen_fd_, POLLIN, 0});
    who.push_back(-1);
  }
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    fds.push_back({pending_[i].fd, POLLIN, 0});
    who.push_back(-2 - static_cast<int>(i));
  }
  for (std::size_t q = 0; q < links_.size(); ++q) {
    const Link& l = links_[q];
    if (reads(l)) {
      fds.push_back({l.in_fd, POLLIN, 0});
      who.push_back(static_cast<int>(q));
    }
  }
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    for (std::size_t q = 0; q < links_.size(); ++q) {
      const Link& l = links_[q];
      if (l.out_fd >= 0 && l.queued > 0 && l.lost.empty()) {
        fds.push_back({l.out_fd, POLLOUT, 0});
        who.push_back(kOut + static_cast<int>(q));
      }
    }
  }
  // Bytes a link staged past an earlier receive's message are not in its
  // socket any more: parse them first, and only look at the sockets then.
  for (std::size_t q = 0; q < links_.size(); ++q) {
    if (links_[q].stage_at < links_[q].stage_end && reads(links_[q])) {
      read_link(static_cast<int>(q));
      timeout_ms = 0;
    }
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const int w = who[i];
    if (w >= kOut) {
      std::lock_guard<std::mutex> lock(out_mu_);
      write_link_locked(w - kOut);
    } else if (w == -1) {
      accept_all();
    } else if (w <= -2) {
      // Found by its descriptor: a read above may have taken pending
      // connections already (adopt_pending), moving the others.
      const auto p = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& c) { return c.fd == fds[i].fd; });
      if (p != pending_.end() && take_hello(*p)) pending_.erase(p);
    } else {
      read_link(w);
    }
  }
}

void TcpTransport::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (AcceptPause::out_of_resources(errno))
        accept_pause_.pause(errno, "group '" + name_ + "': TCP transport");
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Pending p{fd, {}, 0, Clock::now()};
    if (!take_hello(p)) {  // its hello is usually here already
      pending_.push_back(p);
      expire_pending();  // a flood of connections holds kMaxPending descriptors at most
    }
  }
}

void TcpTransport::expire_pending() {
  if (pending_.empty()) return;
  const auto old = Clock::now() - std::chrono::milliseconds(kHelloWaitMs);
  std::size_t n = 0;
  while (n < pending_.size() && (pending_[n].since <= old || pending_.size() - n > kMaxPending)) {
    // Its hello may have come while no call of ours looked: read it first.
    if (!take_hello(pending_[n])) {
      refused(pending_[n].since <= old ? "sent no whole hello in time"
                                       : "sent no whole hello while many others waited");
      ::close(pending_[n].fd);
    }
    ++n;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(n));
}

void TcpTransport::refused(const char* why) {
  if (refusals_ < kReportedRefusals)
    log(LogLevel::kWarn, "group '%s': TCP transport: refused a connection that %s", name_.c_str(), why);
  else if (refusals_ == kReportedRefusals)
    log(LogLevel::kWarn, "group '%s': TCP transport: %d connections refused; further refusals are not reported",
        name_.c_str(), kReportedRefusals);
  ++refusals_;
}

bool TcpTransport::take_hello(Pending& p) {
  const ssize_t n = ::recv(p.fd, p.hello + p.got, kHelloBytes - p.got, MSG_DONTWAIT);
  if (n > 0) p.got += static_cast<std::size_t>(n);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    ::close(p.fd);
    return true;
  }
  if (p.got < kHelloBytes) return false;
  const std::uint32_t from = get32(p.hello + 4);
  Link* l = from < links_.size() ? &links_[from] : nullptr;
  const bool good = get32(p.hello) == kHelloMagic && same_token(p.hello + 8, token_) && l != nullptr &&
                    needs_[from] && !l->in_closed && (l->in_fd < 0 || l->in_ours);
  if (good) {
    // A peer that connected while we did sends on its own connection only
    // (and reads ours).
    l->in_fd = p.fd;
    l->in_sock = Socket::of(p.fd);
    l->in_bytes = kHelloBytes;
    l->in_ours = false;
  } else {
    refused("did not prove it belongs to the group");
    ::close(p.fd);
  }
  return true;
}

bool TcpTransport::adopt_pending(int peer) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  accept_all();
  // Its connection was made before it closed ours, so it is accepted by
  // now; its hello may still be on its way.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (!pending_.empty() && l.in_ours) {
    std::vector<pollfd> fds;
    for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0 || ::poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) break;
    for (std::size_t i = fds.size(); i-- > 0;)
      if (fds[i].revents != 0 && take_hello(pending_[i])) pending_.erase(pending_.begin() + static_cast<long>(i));
  }
  return !l.in_ours;
}

Status TcpTransport::pair_up(const std::vector<int>& peers, const Wait& w) {
  for (int q : peers)
    if (q > rank_ && reaches(q)) ACCRUN_RETURN_IF_ERROR(connect_to(q, w));
  return wait_for(
      [&] {
        for (int q : peers) {
          const Link& l = links_[static_cast<std::size_t>(q)];
          if (q < rank_ && reaches(q) && (l.in_fd < 0 || l.in_ours) && lost(q).empty())
            return false;
        }
        return true;
      },
      -1, w, "the other hosts' leaders to connect", true);
}

// Reads what the socket holds: a large body straight into its message (or
// a posted receive's buffer), anything else through the link's 64 KiB
// staging buffer parsed into frames, so a small message costs one recv.
// Parsing stops at the end of the posted receive's message: the bytes
// staged after it (the next messages, when the sender is ahead) wait there
// for the next receive, whose message is then copied from the stage into
// its buffer once, not into a message of the transport's own first.
// Reading stops as soon as the caller may have what it waits for (the
// posted message; without a posted receive, any whole message), so a
// sender that keeps ahead never makes one call read everything it sends.
void TcpTransport::read_link(int peer) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  if (!reads(l)) return;
  // Where body byte `at` (of the frame) belongs.
  auto place = [&l](std::size_t at) { return at < l.body_keep ? l.body.data() + at : l.direct + (at - l.body_keep); };
  // Whether the caller has what it waits for: a message of the posted
  // receive's tag finished, placed in its buffer or not (begun while no
  // receive was posted, or of another length).  Nothing more is parsed or
  // read then; reading on would take in whatever the sender streams.
  bool posted_done = false, finished = false;
  auto finish = [this, &l, &posted_done, &finished] {
    finished = true;
    if (l.direct == nullptr && !(l.post.active && l.in_tag == l.post.tag)) unasked_ += l.body_total;
    posted_done = posted_done || (l.post.active && l.in_tag == l.post.tag);
    l.post.done = l.post.done || posted_done;
    if (l.direct != nullptr && !l.spill.empty() && l.direct == l.spill.data()) {
      // Its receive gave up: the message is whole here, for a later one.
      l.body += l.spill;
      l.spill.clear();
      l.direct = nullptr;
    }
    l.inbox.push_back(Message{l.in_tag, std::move(l.body), l.direct != nullptr, l.body_total});
    l.inbox_bytes += charge(l.inbox.back());
    l.body.clear();
    l.direct = nullptr;
    l.in_body = false;
  };
  // Parses the staged bytes (header, body, header, ...) up to the end of
  // the posted receive's message.  False once the link is lost.
  auto parse = [&]() -> bool {
    const char* stage = l.stage.data();
    while (l.stage_at < l.stage_end && !posted_done) {
      std::size_t& at = l.stage_at;
      if (!l.in_body) {
        const std::size_t take = std::min(kHeadBytes - l.head_got, l.stage_end - at);
        std::memcpy(l.head + l.head_got, stage + at, take);
        l.head_got += take;
        at += take;
        if (l.head_got < kHeadBytes) break;
        if (get32(l.head) != kFrameMagic) {
          refuse_input(peer, "sent a malformed frame");
          return false;
        }
        const std::uint32_t word = get32(l.head + 4);
        if ((word >> kTagBits) != (l.in_msgs & kNumberMask)) {
          refuse_input(
              peer,
              "sent its message " + std::to_string(word >> kTagBits) + " where message " +
                  std::to_string(l.in_msgs & kNumberMask) +
                  " was due (numbered modulo 2^24): a message was lost or repeated on the way");
          return false;
        }
        const std::uint64_t total = get64(l.head + 8);
        // The posted receive's message: the first of its tag not yet
        // taken, of the expected length.
        const std::uint32_t tag = word & ((1u << kTagBits) - 1);
        Link::Post& po = l.post;
        const bool earlier = std::any_of(l.inbox.begin(), l.inbox.end(),
                                         [&](const Message& m) { return m.tag == tag; });
        const bool fits =
            po.up_to ? total >= po.keep && total <= po.keep + po.len : total == po.keep + po.len;
        const bool matched = po.active && !po.matched && po.tag == tag && !earlier && fits;
        const std::size_t keep = matched ? po.keep : static_cast<std::size_t>(total);
        // The length is the peer's word: one this process cannot hold
        // ends the link (a message is never half taken).
        try {
          if (total > l.body.max_size() || (!matched && total > memory_bytes_))
            throw std::length_error("message length");
          l.body = storage(keep);
        } catch (const std::exception&) {
          refuse_input(peer, "announced a message of " + std::to_string(total) +
                                 " bytes, which this process cannot hold (the host has " +
                                 std::to_string(memory_bytes_) + " bytes of memory)");
          return false;
        }
        ++l.in_msgs;
        l.in_tag = tag;
        l.body_total = static_cast<std::size_t>(total);
        l.body_keep = keep;
        l.body_got = 0;
        l.head_got = 0;
        l.in_body = true;
        po.matched = po.matched || matched;
        l.direct = matched ? po.dest : nullptr;
      }
      std::size_t take = std::min(l.body_total - l.body_got, l.stage_end - at);
      while (take > 0) {  // at most two pieces: the kept head, then the rest
        const std::size_t piece = l.body_got < l.body_keep ? std::min(take, l.body_keep - l.body_got) : take;
        std::memcpy(place(l.body_got), stage + at, piece);
        l.body_got += piece;
        at += piece;
        take -= piece;
      }
      if (l.body_got == l.body_total) finish();
    }
    return true;
  };
  if (!parse() || posted_done) return;
  for (;;) {  // everything staged is parsed here
    const std::size_t body_left = l.in_body ? l.body_total - l.body_got : 0;
    // A large remainder lying in one place is read there directly.
    const std::size_t run = l.body_got < l.body_keep ? l.body_keep - l.body_got : body_left;
    const bool direct = l.in_body && std::min(run, body_left) >= kStageBytes;
    if (!direct && l.stage.empty()) l.stage.resize(kStageBytes);
    char* into = direct ? place(l.body_got) : l.stage.data();
    const std::size_t want = direct ? std::min(run, body_left) : kStageBytes;
    const ssize_t n = ::recv(l.in_fd, into, want, MSG_DONTWAIT);
    if (n == 0) {
      if (l.in_ours && adopt_pending(peer)) return;  // read on from its own connection
      l.in_closed = true;
      lose(peer, "closed its connection");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        lose(peer, std::string("broke the connection (") + std::strerror(errno) + ")");
      return;
    }
    const std::size_t got = static_cast<std::size_t>(n);
    l.in_bytes += got;
    if (direct) {
      l.body_got += got;
      if (l.body_got == l.body_total) finish();
    } else {
      l.stage_at = 0;
      l.stage_end = got;
      if (!parse()) return;
    }
    // The socket is drained, or the caller may have its message.
    if (got < want || posted_done || (finished && !l.post.active)) return;
  }
}

// Caller holds out_mu_.
void TcpTransport::write_link_locked(int peer) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  while (!l.outq.empty()) {
    const Link::Chunk& front = l.outq.front();
    const ssize_t n = ::send(l.out_fd, front.data() + l.out_off, front.size() - l.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        lose_locked(peer, std::string("broke the connection (") + std::strerror(errno) + ")");
      return;
    }
    l.out_off += static_cast<std::size_t>(n);
    l.queued -= static_cast<std::size_t>(n);
    l.out_bytes += static_cast<std::size_t>(n);
    if (l.out_off == front.size()) {
      l.outq.pop_front();
      l.out_off = 0;
    }
  }
}

// The writer thread: sends what the callers queued, so a buffered send
// reaches its peer even while its sender only computes or waits on shared
// memory (a host's non-leader in a collective).
void TcpTransport::write_loop() {
  std::unique_lock<std::mutex> lock(out_mu_);
  while (!stop_) {
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
    std::vector<int> who{-1};
    for (std::size_t q = 0; q < links_.size(); ++q) {
      const Link& l = links_[q];
      if (l.out_fd >= 0 && l.queued > 0 && l.lost.empty()) {
        fds.push_back({l.out_fd, POLLOUT, 0});
        who.push_back(static_cast<int>(q));
      }
    }
    lock.unlock();
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents != 0) {
      std::uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    lock.lock();
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) write_link_locked(who[i]);
    }
  }
}

void TcpTransport::wake_writer() {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

std::string TcpTransport::link_state(int peer) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  std::string s;
  if (l.in_fd < 0) {
    s = "it never connected";
  } else {
    const std::uint64_t whole = l.in_msgs - (l.in_body ? 1 : 0);
    s = "its link (" + l.in_sock.ends + "): " + std::to_string(whole) + " message" + (whole == 1 ? "" : "s") +
        " received";
    if (l.in_body)
      s += " and " + std::to_string(l.body_got) + " of the next one's " + std::to_string(l.body_total) + " bytes";
    else if (l.head_got > 0)
      s += " and " + std::to_string(l.head_got) + " of the next one's 16 header bytes";
    s += " (" + std::to_string(l.in_bytes) + " bytes read)";
    if (l.stage_end > l.stage_at) s += ", " + std::to_string(l.stage_end - l.stage_at) + " bytes read ahead";
    TcpCounts k;
    const bool counted = !l.in_closed && tcp_counts(l.in_fd, &k);
    if (counted && k.unread > 0) s += ", " + std::to_string(k.unread) + " bytes unread in its socket";
    s += reused(l.in_fd, l.in_sock);
    if (counted && k.received - k.unread != l.in_bytes)
      s += "; of the " + std::to_string(k.received) + " bytes the kernel received on that connection " +
           std::to_string(k.received - k.unread) + " were read, " + std::to_string(l.in_bytes) +
           " by this transport: something else in this process read it";
  }
  std::lock_guard<std::mutex> lock(out_mu_);
  s += "; " + std::to_string(l.out_msgs) + " sent to it (" + std::to_string(l.out_bytes) + " bytes written" +
       (l.out_fd >= 0 && l.out_fd != l.in_fd ? ", on " + l.out_sock.ends : std::string()) + ")";
  if (l.queued > 0) s += ", " + std::to_string(l.queued) + " bytes not yet handed to the kernel";
  TcpCounts k;
  const bool counted = l.out_fd >= 0 && l.lost.empty() && tcp_counts(l.out_fd, &k);
  if (counted && k.unacked > 0) s += ", " + std::to_string(k.unacked) + " bytes in its socket not yet acknowledged";
  if (l.out_fd >= 0 && l.out_fd != l.in_fd) s += reused(l.out_fd, l.out_sock);
  if (counted && k.acked + k.unacked - l.out_base != l.out_bytes)
    s += "; the kernel took " + std::to_string(k.acked + k.unacked - l.out_base) + " bytes to send on that connection, " +
         std::to_string(l.out_bytes) + " from this transport: something else in this process wrote to it";
  return s;
}

std::string TcpTransport::lost(int peer) {
  std::lock_guard<std::mutex> lock(out_mu_);
  return links_[static_cast<std::size_t>(peer)].lost;
}

void TcpTransport::refuse_input(int peer, const std::string& why) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  l.stage_at = l.stage_end = 0;
  l.head_got = 0;
  l.in_closed = true;
  // The reason is recorded before the socket is shut: the writer thread
  // would otherwise meet the shut socket first and name a broken pipe.
  lose(peer, why);
  if (l.in_fd >= 0) ::shutdown(l.in_fd, SHUT_RDWR);
}

void TcpTransport::lose(int peer, const std::string& why) {
  std::lock_guard<std::mutex> lock(out_mu_);
  lose_locked(peer, why);
}

void TcpTransport::lose_locked(int peer, const std::string& why) {
  Link& l = links_[static_cast<std::size_t>(peer)];
  if (!l.lost.empty()) return;
  l.lost = why;
  l.dropped = l.queued;
  l.queued = 0;
  l.outq.clear();
  l.out_off = 0;
  // The peer is told at once: its reads of this connection end, so a wait
  // of its own on a message this link will never carry fails now, not at
  // the group's timeout.  (Shut down, not closed: the descriptor stays this
  // link's until the transport goes.)  Only the writing side where the
  // connection carries the peer's messages too: what the peer sent before
  // it went (why it gave up) stays there to be read.
  if (l.out_fd >= 0) ::shutdown(l.out_fd, l.out_fd == l.in_fd ? SHUT_WR : SHUT_RDWR);
  const std::string dropped =
      l.dropped > 0 ? "; " + std::to_string(l.dropped) + " bytes queued for it were never sent" : std::string();
  log(l.dropped > 0 ? LogLevel::kWarn : LogLevel::kDebug, "group '%s': TCP transport: %s %s%s", name_.c_str(),
      describe(peer).c_str(), why.c_str(), dropped.c_str());
}

}  // namespace accrun::collectives::store
