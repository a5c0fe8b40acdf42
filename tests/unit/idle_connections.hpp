// Connections to a loopback port that send nothing, as anyone who reaches a
// listening port may open them (the listeners' flood tests).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace accrun::testing {

// n non-blocking connections to 127.0.0.1:port (connected or in progress);
// fewer if the process runs out of descriptors.
inline std::vector<int> open_idle(std::uint16_t port, int n) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
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

}  // namespace accrun::testing
