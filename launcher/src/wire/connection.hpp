// wire/connection.hpp — one framed, non-blocking protocol connection, and TCP helpers.
//
// A Connection is what the event loop keeps per peer (agent <-> controller,
// agent <-> agent, or the in-process socketpair on one host) once the
// handshake (auth.hpp) has succeeded.  It never blocks: send() queues,
// flush() writes what the socket takes, read_some() reads what is there.
// The event loop watches fd() for EPOLLIN always and for EPOLLOUT while
// flush() reports pending output (level-triggered).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/status.hpp"
#include "wire/frame.hpp"

namespace accrun::wire {

// Owns a connected stream socket (TCP or AF_UNIX).  Move-only; the
// destructor closes the fd.  Not thread-safe: one event loop thread uses it.
class Connection {
 public:
  // Default cap on queued output: four maximal frames.  A caller that finds
  // pending_bytes() high stops producing for this peer until flush() drains.
  static constexpr size_t kDefaultMaxPending = 4 * (kMaxFrame + kFrameHeaderSize);
  // read_some() stops after this many bytes so one busy peer cannot starve
  // the loop; the rest is read on the next (level-triggered) wakeup.
  static constexpr size_t kReadBudget = size_t{16} << 20;

  // An empty connection (fd() == -1); every call but the destructor and
  // assignment is an error.
  Connection() = default;
  // Takes ownership of `fd`, a connected stream socket, and sets O_NONBLOCK
  // on it.  `max_pending` caps the bytes send() will queue.
  explicit Connection(int fd, size_t max_pending = kDefaultMaxPending);
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }

  // Queues one frame; never writes, never blocks (call flush()).  Errors:
  // Code::kInvalidArgument when payload.size() > kMaxFrame; Code::kNoMemory
  // when the frame would take pending_bytes() over the cap (nothing is
  // queued; apply backpressure and retry after flush()); Code::kInvalidUsage
  // on a closed connection.
  Status send(uint16_t type, std::string_view payload);

  // Writes as much queued output as the socket accepts without blocking.
  // Returns true while output is still pending (watch EPOLLOUT), false when
  // the queue is empty.  Errors: Code::kSystem (e.g. EPIPE, ECONNRESET: the
  // peer is gone; SIGPIPE is never raised); the connection should be closed.
  Result<bool> flush();

  // Reads what is available (up to kReadBudget bytes) without blocking and
  // returns the frames it completes, possibly none.  When the peer has
  // closed the stream, frames completed before the end are returned first
  // and the next call reports the end; likewise frames completed before a
  // protocol error.  Errors: Code::kRemote when the peer closed the
  // connection (eof() is then true; the message says whether a frame was
  // cut short); Code::kInvalidArgument for a protocol error from the
  // FrameDecoder (sticky); Code::kSystem for a failed recv.  After any error
  // the connection should be closed.
  Result<std::vector<Frame>> read_some();

  // Feeds bytes that were read from this fd before the Connection owned it
  // (Handshake::Step::leftover) and returns the frames they complete.
  // Errors: the FrameDecoder's protocol error.
  Result<std::vector<Frame>> feed_buffered(std::string_view bytes);

  // Bytes queued and not yet written.
  size_t pending_bytes() const { return pending_; }
  size_t max_pending() const { return max_pending_; }
  // True once read_some() saw the end of the stream.
  bool eof() const { return eof_; }

  // Closes the fd now (idempotent); queued output is dropped.
  void close();

 private:
  int fd_ = -1;
  size_t max_pending_ = kDefaultMaxPending;
  std::deque<std::string> out_;  // encoded frames, front partly written
  size_t out_off_ = 0;           // bytes of out_.front() already written
  size_t pending_ = 0;
  FrameDecoder decoder_;
  std::vector<char> read_buf_;
  bool eof_ = false;
  bool eof_seen_ = false;  // recv returned 0; reported on the next read_some()
};

// A listening TCP socket bound to exactly `bind_address` (a numeric IPv4
// or IPv6 address or a host name resolving to one; never the wildcard unless
// asked for by "0.0.0.0" or "::") and `port` (0: the kernel picks; see
// local_port()).  Non-blocking, close-on-exec, SO_REUSEADDR.  The caller
// owns the returned fd.  Errors: Code::kInvalidArgument for an empty or
// unresolvable address; Code::kSystem when socket/bind/listen fails (the
// message names the address and port).
Result<int> listen_tcp(const std::string& bind_address, uint16_t port);

// Accepts one pending connection on a listening socket: a non-blocking,
// close-on-exec fd with TCP_NODELAY (for TCP), owned by the caller; -1 when
// no connection is pending.  Never blocks.  Errors: Code::kSystem.
Result<int> accept_tcp(int listen_fd);

// How long the peer's host has acknowledged nothing on connection `fd`
// while some of what was sent on it is unacknowledged; 0 when all of it is,
// and for a socket that is not TCP.  The peer's kernel acknowledges however
// busy its process is, and answers a closed window too, so only a host or a
// network that is down lets this grow (TCP_USER_TIMEOUT, by contrast, also
// ends a connection whose reader merely stops reading).
std::chrono::milliseconds unacknowledged(int fd);

// The rule both ends of the controller's connections judge a lost host by,
// looked at once a second just before a beat goes out (by then a host that
// is up has acknowledged what went before it): unacknowledged() at least
// `limit` at two looks in a row.  Twice, because the first look may follow
// a pause of this process's own (Ctrl-Z, a slow reader of its output)
// during which the peer was silent too.
class UnackedWatch {
 public:
  bool lost(int fd, std::chrono::milliseconds limit) {
    looks_ = unacknowledged(fd) >= limit ? looks_ + 1 : 0;
    return looks_ >= 2;
  }

 private:
  int looks_ = 0;
};

// The local port a socket is bound to.  Errors: Code::kSystem (getsockname),
// Code::kInvalidArgument when the socket is not IPv4/IPv6.
Result<uint16_t> local_port(int fd);

// Connects to `host`:`port` (every address getaddrinfo gives, in order),
// waiting at most `timeout` in total.  Returns a connected, non-blocking,
// close-on-exec fd with TCP_NODELAY, owned by the caller.  Blocks the
// calling thread up to `timeout` (meant for an agent's one outgoing
// connection; event loops should connect non-blockingly themselves).
// Errors: Code::kInvalidArgument (host does not resolve), Code::kTimeout,
// Code::kSystem (refused, unreachable; the message names the last address
// tried and the errno).
Result<int> connect_tcp(const std::string& host, uint16_t port,
                        std::chrono::milliseconds timeout);

// The host's IPv4 addresses on interfaces that are up, as dotted quads:
// non-loopback first (in interface order), then loopback.  The controller
// sends this list to agents so they can pick one they reach.  Empty if
// getifaddrs fails.
std::vector<std::string> local_addresses();

// Where a host's agent listens for what others reach it by (the agents it
// starts, other hosts' ranks asking for objects): the local address of
// `fd`, its connection to the controller, which the controller's network
// reaches; for a socket that is not TCP (the socketpair of the agent on
// the controller's own host), every non-loopback address of this host (the
// loopback ones when there are no others).
std::vector<std::string> addresses_reached_by(int fd);

// A connected pair of non-blocking, close-on-exec AF_UNIX stream sockets:
// the controller <-> agent link when both run in one process.  The caller
// owns both fds.  Errors: Code::kSystem.
Result<std::array<int, 2>> stream_socketpair();

}  // namespace accrun::wire
