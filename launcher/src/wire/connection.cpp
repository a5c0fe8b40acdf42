// wire/connection.cpp — non-blocking framed connections and TCP helpers.
#include "wire/connection.hpp"

#include "peer_guard.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace accrun::wire {
namespace {

// Most iovecs handed to one sendmsg.
constexpr size_t kMaxIov = 64;
constexpr size_t kReadChunk = size_t{64} << 10;

void set_nodelay(int fd) {
  int one = 1;
  // Fails harmlessly on AF_UNIX sockets; latency matters, correctness does not.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

// Closes an fd on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() { close_fd(fd_); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Result<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    if (rc == EAI_SYSTEM) return system_error("getaddrinfo " + host);
    return invalid_argument("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return AddrInfoPtr(res);
}

std::string addr_string(const sockaddr* sa) {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "?";
  const socklen_t len =
      sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  ::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
  if (sa->sa_family == AF_INET6) return std::string("[") + host + "]:" + serv;
  return std::string(host) + ":" + serv;
}

}  // namespace

// --- Connection ---

Connection::Connection(int fd, size_t max_pending) : fd_(fd), max_pending_(max_pending) {
  assert(fd >= 0);
  const int flags = ::fcntl(fd_, F_GETFL);
  // F_GETFL/F_SETFL fail only on a bad fd, which is the caller's bug.
  [[maybe_unused]] const int rc = ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  assert(flags >= 0 && rc == 0);
}

Connection::Connection(Connection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      max_pending_(other.max_pending_),
      out_(std::move(other.out_)),
      out_off_(std::exchange(other.out_off_, 0)),
      pending_(std::exchange(other.pending_, 0)),
      decoder_(std::move(other.decoder_)),
      read_buf_(std::move(other.read_buf_)),
      eof_(other.eof_),
      eof_seen_(other.eof_seen_) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    max_pending_ = other.max_pending_;
    out_ = std::move(other.out_);
    out_off_ = std::exchange(other.out_off_, 0);
    pending_ = std::exchange(other.pending_, 0);
    decoder_ = std::move(other.decoder_);
    read_buf_ = std::move(other.read_buf_);
    eof_ = other.eof_;
    eof_seen_ = other.eof_seen_;
  }
  return *this;
}

Connection::~Connection() { close(); }

void Connection::close() {
  close_fd(std::exchange(fd_, -1));
  out_.clear();
  out_off_ = 0;
  pending_ = 0;
}

Status Connection::send(uint16_t type, std::string_view payload) {
  if (fd_ < 0) return invalid_usage("wire: send on a closed connection");
  if (payload.size() > kMaxFrame) {
    return invalid_argument("wire: message of type " + std::to_string(type) + " has " +
                            std::to_string(payload.size()) + " bytes, more than the limit of " +
                            std::to_string(kMaxFrame));
  }
  const size_t frame_size = kFrameHeaderSize + payload.size();
  if (pending_ + frame_size > max_pending_) {
    return no_memory("wire: output queue full (" + std::to_string(pending_) + " bytes pending, " +
                     std::to_string(frame_size) + " more would pass the cap of " +
                     std::to_string(max_pending_) + ")");
  }
  out_.push_back(encode_frame(type, payload));
  pending_ += frame_size;
  return Status::ok();
}

Result<bool> Connection::flush() {
  if (fd_ < 0) return invalid_usage("wire: flush on a closed connection");
  while (pending_ > 0) {
    iovec iov[kMaxIov];
    size_t n = 0;
    for (auto it = out_.begin(); it != out_.end() && n < kMaxIov; ++it, ++n) {
      const size_t skip = (n == 0) ? out_off_ : 0;
      iov[n].iov_base = const_cast<char*>(it->data() + skip);
      iov[n].iov_len = it->size() - skip;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return system_error("wire: send");
    }
    size_t left = static_cast<size_t>(w);
    pending_ -= left;
    while (left > 0) {
      const size_t rest = out_.front().size() - out_off_;
      if (left < rest) {
        out_off_ += left;
        left = 0;
      } else {
        left -= rest;
        out_.pop_front();
        out_off_ = 0;
      }
    }
  }
  return false;
}

Result<std::vector<Frame>> Connection::feed_buffered(std::string_view bytes) {
  std::vector<Frame> frames;
  ACCRUN_RETURN_IF_ERROR(decoder_.feed(bytes.data(), bytes.size(), frames));
  return frames;
}

Result<std::vector<Frame>> Connection::read_some() {
  if (fd_ < 0) return invalid_usage("wire: read on a closed connection");
  if (!decoder_.status().is_ok()) return decoder_.status();
  if (eof_seen_) {
    eof_ = true;
    if (decoder_.buffered() != 0) {
      return remote_error("wire: peer closed the connection in the middle of a frame (" +
                          std::to_string(decoder_.buffered()) + " bytes of it received)");
    }
    return remote_error("wire: peer closed the connection");
  }
  std::vector<Frame> frames;
  // Reused across calls: no allocation per wakeup.
  if (read_buf_.size() < kReadChunk) read_buf_.resize(kReadChunk);
  size_t total = 0;
  while (total < kReadBudget) {
    const ssize_t r = ::recv(fd_, read_buf_.data(), read_buf_.size(), MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (!frames.empty()) break;  // report the error on the next call, after these frames
      return system_error("wire: recv");
    }
    if (r == 0) {
      eof_seen_ = true;
      if (frames.empty()) return read_some();
      break;
    }
    total += static_cast<size_t>(r);
    Status s = decoder_.feed(read_buf_.data(), static_cast<size_t>(r), frames);
    if (!s.is_ok()) {
      // The error is sticky: frames completed before it are delivered, the
      // next call reports it.
      if (!frames.empty()) break;
      return s;
    }
  }
  return frames;
}

// --- helpers ---

Result<int> listen_tcp(const std::string& bind_address, uint16_t port) {
  if (bind_address.empty()) {
    return invalid_argument("listen: no bind address given (accrun never binds every interface "
                            "implicitly)");
  }
  auto res = resolve(bind_address, port, /*passive=*/false);
  if (!res) return res.status();
  Status last = invalid_argument("listen: '" + bind_address + "' has no stream address");
  for (const addrinfo* ai = res->get(); ai != nullptr; ai = ai->ai_next) {
    FdGuard fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol));
    if (fd.get() < 0) {
      last = system_error("listen: socket for " + addr_string(ai->ai_addr));
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      // Exactly the address asked for: "::" must not also take IPv4.
      (void)::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    }
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = system_error("listen: bind " + addr_string(ai->ai_addr));
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      last = system_error("listen: listen " + addr_string(ai->ai_addr));
      continue;
    }
    return fd.release();
  }
  return last;
}

Result<int> accept_tcp(int listen_fd) {
  for (;;) {
    // Not ::accept4: in accrun that is the PMIx server's guarded accept,
    // which admits only local sockets of this uid (peer_guard.hpp); wire
    // peers may be on other hosts and prove the job's secret instead.
    const int fd = launcher::accept_unguarded(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return fd;
    }
    if (errno == EINTR) continue;
    // A connection that died in the backlog is not the listener's failure.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return -1;
    return system_error("accept");
  }
}

std::chrono::milliseconds unacknowledged(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_unacked == 0)
    return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(ti.tcpi_last_ack_recv);
}

Result<uint16_t> local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return system_error("getsockname");
  }
  if (ss.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  }
  if (ss.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  }
  return invalid_argument("local_port: socket is not IPv4 or IPv6 (family " +
                          std::to_string(ss.ss_family) + ")");
}

Result<int> connect_tcp(const std::string& host, uint16_t port,
                        std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto res = resolve(host, port, /*passive=*/false);
  if (!res) return res.status();
  Status last = invalid_argument("connect: '" + host + "' has no stream address");
  for (const addrinfo* ai = res->get(); ai != nullptr; ai = ai->ai_next) {
    const std::string where = addr_string(ai->ai_addr);
    FdGuard fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol));
    if (fd.get() < 0) {
      last = system_error("connect: socket for " + where);
      continue;
    }
    int rc;
    do {
      rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) {
      last = system_error("connect " + where);
      continue;
    }
    if (rc != 0) {
      int err = 0;
      for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
          return timeout_error("connect " + where + ": no answer within " +
                               std::to_string(timeout.count()) + " ms");
        }
        pollfd pfd{fd.get(), POLLOUT, 0};
        const int pr =
            ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return system_error("connect: poll");
        if (pr == 0) continue;
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        break;
      }
      if (err != 0) {
        last = system_error("connect " + where, err);
        continue;
      }
    }
    set_nodelay(fd.get());
    return fd.release();
  }
  return last;
}

std::vector<std::string> local_addresses() {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return {};
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(ifs, freeifaddrs);
  std::vector<std::string> outer;
  std::vector<std::string> loopback;
  for (const ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text) == nullptr) continue;
    auto& list = (i->ifa_flags & IFF_LOOPBACK) != 0 ? loopback : outer;
    if (std::find(list.begin(), list.end(), text) == list.end()) list.emplace_back(text);
  }
  outer.insert(outer.end(), loopback.begin(), loopback.end());
  return outer;
}

std::vector<std::string> addresses_reached_by(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = {};
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET && inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host))
      return {host};
    if (ss.ss_family == AF_INET6 && inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host))
      return {host};
  }
  std::vector<std::string> all = local_addresses(), out;
  for (const std::string& a : all)
    if (a.rfind("127.", 0) != 0) out.push_back(a);
  return out.empty() ? all : out;
}

Result<std::array<int, 2>> stream_socketpair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
    return system_error("socketpair");
  }
  return std::array<int, 2>{sv[0], sv[1]};
}

}  // namespace accrun::wire
