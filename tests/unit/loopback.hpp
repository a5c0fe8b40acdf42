// Sockets on 127.0.0.1 for the tests: a listener on a port the kernel
// picks, a connection to a port, and connections that send nothing, as
// anyone who reaches a listening port may open them (the listeners' flood
// tests).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace accrun::testing {

inline sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A listening socket on 127.0.0.1, its port (the kernel's pick) in *port;
// -1 on failure.
inline int listen_loopback(int backlog, std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a = loopback_address(0);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// A blocking connection to 127.0.0.1:port; -1 on failure.
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in a = loopback_address(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// n non-blocking connections to 127.0.0.1:port (connected or in progress);
// fewer if the process runs out of descriptors.
inline std::vector<int> open_idle(std::uint16_t port, int n) {
  const sockaddr_in a = loopback_address(port);
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    fds.push_back(fd);
  }
  return fds;
}

// How many of fds the other side has closed; closes them all.
inline std::size_t closed_by_peer(const std::vector<int>& fds) {
  std::size_t closed = 0;
  for (int fd : fds) {
    char c;
    if (::recv(fd, &c, 1, MSG_DONTWAIT) == 0 || errno == ECONNRESET) ++closed;
    ::close(fd);
  }
  return closed;
}

// While it lives, this process may open only `spare` more descriptors
// (RLIMIT_NOFILE lowered to the lowest free one plus `spare`): the
// listeners' tests at the descriptor limit.  ok() says whether it was set.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(int spare) {
    const int lowest_free = ::dup(0);
    if (lowest_free < 0 || ::getrlimit(RLIMIT_NOFILE, &was_) != 0) return;
    ::close(lowest_free);
    rlimit low = was_;
    low.rlim_cur = static_cast<rlim_t>(lowest_free + spare);
    set_ = ::setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~DescriptorLimit() { lift(); }
  DescriptorLimit(const DescriptorLimit&) = delete;
  DescriptorLimit& operator=(const DescriptorLimit&) = delete;
  bool ok() const { return set_; }
  // The limit as it was; true once it is.
  bool lift() {
    if (set_ && ::setrlimit(RLIMIT_NOFILE, &was_) == 0) set_ = false;
    return !set_;
  }

 private:
  rlimit was_{};
  bool set_ = false;
};

}  // namespace accrun::testing
