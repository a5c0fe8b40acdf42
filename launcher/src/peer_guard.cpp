// peer_guard.cpp — accept() for the libraries inside accrun: only this
// user's own processes get through (peer_guard.hpp).
#include "peer_guard.hpp"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace accrun::launcher {

namespace {

std::atomic<unsigned long> g_refusals{0};

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "a socket of family " + std::to_string(a.ss_family);
}

// Asks the kernel for the socket whose local end is `peer` and remote end is
// `local`: the client's side of our connection.  Exact lookup, no dump.
PeerOwner lookup_tcp(const sockaddr_storage& local, const sockaddr_storage& peer) {
  PeerOwner out;
  out.peer = address_text(peer);
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg;
  std::memset(&msg, 0, sizeof msg);
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<uint8_t>(peer.ss_family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (peer.ss_family == AF_INET) {
    const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
    const auto* l = reinterpret_cast<const sockaddr_in*>(&local);
    msg.req.id.idiag_sport = p->sin_port;
    msg.req.id.idiag_dport = l->sin_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin_addr, sizeof p->sin_addr);
    std::memcpy(msg.req.id.idiag_dst, &l->sin_addr, sizeof l->sin_addr);
  } else {
    const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
    const auto* l = reinterpret_cast<const sockaddr_in6*>(&local);
    msg.req.id.idiag_sport = p->sin6_port;
    msg.req.id.idiag_dport = l->sin6_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin6_addr, sizeof p->sin6_addr);
    std::memcpy(msg.req.id.idiag_dst, &l->sin6_addr, sizeof l->sin6_addr);
  }
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) {
    out.why = std::string("socket(NETLINK_SOCK_DIAG): ") + std::strerror(errno);
    return out;
  }
  timeval tv{1, 0};  // the kernel answers at once; never hang the listener
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(nl, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    out.why = std::string("sock_diag request: ") + std::strerror(errno);
    close(nl);
    return out;
  }
  alignas(nlmsghdr) char buf[8192];
  ssize_t n = recv(nl, buf, sizeof buf, 0);
  int err = errno;
  close(nl);
  if (n < 0) {
    out.why = std::string("sock_diag reply: ") + std::strerror(err);
    return out;
  }
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      out.why = e->error == -ENOENT ? "no socket on this host has that address (a remote peer)"
                                    : std::string("sock_diag: ") + std::strerror(-e->error);
      return out;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
    const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    // The kernel's answer must be the socket we asked about.
    if (d->id.idiag_sport != msg.req.id.idiag_sport || d->id.idiag_dport != msg.req.id.idiag_dport) continue;
    out.uid = d->idiag_uid;
    return out;
  }
  out.why = "sock_diag gave no answer for the socket";
  return out;
}

// The decision for one accepted connection; a message when refused, none
// when its peer is already gone.
bool admit(int fd, std::string* why) {
  PeerOwner owner = peer_owner(fd);
  uid_t me = geteuid();
  if (owner.uid && *owner.uid == me) return true;
  if (owner.gone) return false;
  *why = owner.uid ? "from " + owner.peer + ", a socket of uid " + std::to_string(*owner.uid) +
                         " (the job runs as uid " + std::to_string(me) + ")"
                   : "from " + owner.peer + ": " + owner.why;
  return false;
}

// A socket already at end of file, with the flags accept4 was asked for.
int dead_socket(int flags) {
  int sv[2];
  int type = SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (socketpair(AF_UNIX, type, 0, sv) != 0) return -1;
  close(sv[1]);
  return sv[0];
}

void report(const std::string& why) {
  unsigned long n = ++g_refusals;
  // A flood of attempts must not flood the user's terminal either.
  if (n > 10) {
    if (n == 11) {
      static const char kMore[] = "accrun: further refused connections are not reported\n";
      [[maybe_unused]] ssize_t w = write(2, kMore, sizeof kMore - 1);
    }
    return;
  }
  std::string line = "accrun: refused a connection to the job's PMIx server " + why +
                     ": only the job's own user may connect; the job goes on\n";
  [[maybe_unused]] ssize_t w = write(2, line.data(), line.size());
}

int guarded_accept(int listener, sockaddr* addr, socklen_t* len, int flags) {
  sockaddr_storage ignored;
  socklen_t ignored_len = sizeof ignored;
  int fd = static_cast<int>(syscall(SYS_accept4, listener, addr != nullptr ? addr : reinterpret_cast<sockaddr*>(&ignored),
                                    addr != nullptr ? len : &ignored_len, flags));
  if (fd < 0) return fd;
  std::string why;
  if (admit(fd, &why)) return fd;
  close(fd);
  if (!why.empty()) report(why);
  int dead = dead_socket(flags);
  if (dead < 0) {
    errno = ECONNABORTED;
    return -1;
  }
  return dead;
}

}  // namespace

PeerOwner peer_owner(int fd) {
  PeerOwner out;
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof local, plen = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
    out.gone = errno == ENOTCONN;
    out.why = std::string("getpeername: ") + std::strerror(errno);
    return out;
  }
  if (peer.ss_family == AF_UNIX) {
    out.peer = "a Unix socket";
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
      out.why = std::string("SO_PEERCRED: ") + std::strerror(errno);
      return out;
    }
    out.uid = cred.uid;
    return out;
  }
  if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) {
    out.peer = address_text(peer);
    out.why = "not a TCP or Unix socket";
    return out;
  }
  return lookup_tcp(local, peer);
}

int accept_unguarded(int listener, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(syscall(SYS_accept4, listener, addr, len, flags));
}

unsigned long peer_guard_refusals() { return g_refusals.load(); }

void peer_guard_link() {}

}  // namespace accrun::launcher

// The definitions the PMIx library's accept() calls bind to (the executable
// comes first in symbol lookup).  Every accept in accrun's process goes
// through the check; accrun's own sockets do not use accept().
extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  return accrun::launcher::guarded_accept(fd, addr, len, 0);
}

extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return accrun::launcher::guarded_accept(fd, addr, len, flags);
}
