// The kernel's byte counts of a TCP connection (tcp_counts.hpp).  A file of
// its own: the kernel's struct tcp_info, which has the byte counts, and the C
// library's, which does not, cannot share a translation unit.
#include "store/tcp_counts.hpp"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>

namespace accrun::collectives::store {

bool tcp_counts(int fd, TcpCounts* out) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    return false;
  int unacked = 0, unread = 0;
  if (::ioctl(fd, SIOCOUTQ, &unacked) != 0 || ::ioctl(fd, SIOCINQ, &unread) != 0) return false;
  out->received = info.tcpi_bytes_received;
  out->acked = info.tcpi_bytes_acked;
  out->unacked = static_cast<std::uint64_t>(unacked);
  out->unread = static_cast<std::uint64_t>(unread);
  return true;
}

}  // namespace accrun::collectives::store
