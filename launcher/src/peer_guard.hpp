// peer_guard.hpp — who may connect to the sockets that libraries listen on
// inside accrun (accrun(7) "SECURITY").
//
// The PMIx server library accepts its clients on a TCP socket on the
// loopback address and believes the uid a client says it has (its "native"
// security over TCP sends getuid() in the handshake).  Another local user
// could therefore join a job with a faked uid.  accrun closes that hole
// beneath the library: the executable defines accept() and accept4(), which
// the library's calls bind to, and every connection they return must come
// from a socket on this host whose owner, as the kernel records it, is
// accrun's own effective uid.  The owner is looked up through the kernel's
// socket diagnostics (NETLINK_SOCK_DIAG) for TCP, and SO_PEERCRED for Unix
// sockets; a process cannot fake either, whatever it makes getuid() return.
// A refused connection is closed at once (the client sees the connection
// end), and the library is handed a socket that is already at end of file,
// which it drops as a client that went away during its handshake.  A
// connection its client reset before the check (a rank killed as it
// connects) is dropped the same way, without a message.
//
// accrun's own code never calls the guarded functions: its sockets (the
// agents' wire) authenticate with the job's secret instead.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <optional>
#include <string>

namespace accrun::launcher {

// The kernel's record of who owns the other end of a connected socket:
// `uid` when the peer is a socket on this host (in this network namespace),
// nothing when it is not (a remote host) or the lookup failed; `why` says
// which, for messages.
struct PeerOwner {
  std::optional<uid_t> uid;
  std::string peer;  // "127.0.0.1:40312", for messages
  std::string why;   // set when uid is empty
  // The peer ended the connection (a reset) before it could be looked at:
  // nothing is left to admit or refuse.
  bool gone = false;
};
// Thread-safe; one netlink round trip (tens of microseconds).
PeerOwner peer_owner(int fd);

// Accepts on `listener` without the check, for accrun's own sockets, whose
// peers prove the job's secret instead (and may be on other hosts).
int accept_unguarded(int listener, sockaddr* addr, socklen_t* len, int flags);

// Does nothing; the PMIx host calls it so that the guard is always linked
// into a program that runs a PMIx server.
void peer_guard_link();

// Connections refused so far in this process (for tests and messages).
unsigned long peer_guard_refusals();

}  // namespace accrun::launcher
