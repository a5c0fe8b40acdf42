// The congestion control of accrun's bulk connections between hosts: the
// store's TCP transport and the agents' object server.
//
// BBR (some hosts' default) paces a connection at the delivery rate it
// measured and holds back while the round trip stays above the least it has
// seen; between hosts microseconds apart, a busy receiver's scheduling delay
// looks like a queue to it.  Two namespace hosts of one machine: one stream
// 1.4 GB/s under BBR (round trip 0.58 ms, minimum 2 us), 6.5 GB/s under
// Reno; a 1 MiB allreduce 0.92 against 0.36 ms.  Loss-based Reno does not
// look at the round trip, and Linux lets every user pick it (it is always
// in net.ipv4.tcp_allowed_congestion_control), so it is accrun's default.
// ACCRUN_STORE_TCP_CONGESTION names another one, or "system" for the
// host's default (accrun(7)).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

namespace accrun {

inline constexpr const char* kDefaultTcpCongestion = "reno";
inline constexpr const char* kSystemTcpCongestion = "system";

// A congestion control's name as the kernel takes it: 1..15 of [a-z0-9_].
inline bool valid_tcp_congestion(const std::string& name) {
  if (name.empty() || name.size() > 15) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Sets fd's congestion control ("system" or "": the host's default stays).
// 0, or the errno of the refusal (ENOENT: not available on this host;
// EPERM: not in net.ipv4.tcp_allowed_congestion_control).
inline int set_tcp_congestion(int fd, const std::string& name) {
  if (name.empty() || name == kSystemTcpCongestion) return 0;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0) return 0;
  return errno;
}

}  // namespace accrun
