// The kernel's byte counts of one TCP connection, to hold against what the
// store's TCP transport itself read from and wrote to it: a difference
// means something else in the process read or wrote the connection.
#pragma once

#include <cstdint>

namespace accrun::collectives::store {

struct TcpCounts {
  std::uint64_t received = 0;  // the peer's bytes, in order, that reached the socket
  std::uint64_t acked = 0;     // our bytes the peer acknowledged
  std::uint64_t unacked = 0;   // our bytes in the socket, not yet acknowledged
  std::uint64_t unread = 0;    // the peer's bytes in the socket, not yet read
};

// False where the kernel does not tell them (TCP_INFO without the byte
// counts, before Linux 4.19) or fd is no TCP socket.
bool tcp_counts(int fd, TcpCounts* out);

}  // namespace accrun::collectives::store
