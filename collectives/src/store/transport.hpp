// The store backend's transports: what its algorithms see of the wire.
//
// A store group talks to each peer through a Channel: a reliable, ordered,
// buffered message link.  A Transport provides the channels to the peers it
// reaches; the group picks, per peer, the transport that reaches it (today
// shared memory for every member on this host, shm_transport.cpp), so the
// algorithms above (p2p.cpp, and every algorithm written over channels)
// never know which transport carries a message.
//
// A transport between hosts (plain TCP, libfabric) plugs in here without
// touching the algorithms: at set-up it publishes its endpoint address under
// "<transport>.addr.<group rank>" through the group's Rendezvous (already
// scoped to the group's name and epoch, so an address can never reach
// another incarnation of the group), looks up its peers' addresses with
// Rendezvous::lookup, connects (lazily or all at once), and reports a broken
// link or a failed peer as kRemote from send and recv.  The shared-memory
// transport publishes one key, "store.segment", the segment's path.
#pragma once

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "accrun/status.hpp"

namespace accrun::collectives::store {

using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC_COARSE in nanoseconds: Clock's clock (CLOCK_MONOTONIC on
// Linux) as of the kernel's last tick, read from memory (4 ns here, against
// 26 for Clock::now(), which reads the time stamp counter and, on a
// paravirtualised clock, scales it).  It lags Clock by some milliseconds (3
// to 7 here, 17 once), so its readings are compared only with each other:
// for the marks a timeout message reads in milliseconds (a small call across
// hosts set three, at a clock reading each).
inline std::int64_t coarse_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The host's physical memory in bytes: a message whose length, as its
// sender announces it, exceeds this cannot be held, and a transport refuses
// it rather than try.
inline std::uint64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(size)
             : UINT64_MAX;
}

// How long a call may wait, and what to call it in messages.
struct Wait {
  Clock::time_point deadline = Clock::time_point::max();
  int timeout_ms = -1;      // what the deadline came from (< 0: none)
  const char* op = "call";  // the user's call ("send", "allreduce", ...)
  // What else ends the wait with its error, asked where the peers are
  // checked (a group across hosts: a member of this host that gave up).
  std::function<Status()> also;
  // A long wait on an oversubscribed host (Tuning::across_sleep_min): block in
  // poll at once rather than yield by turns first.  Transports without a
  // blocking wait ignore it.
  bool sleep = false;
  // A collective's wait: also ends (kRemote) when any member of the group
  // failed, not only the awaited peer.  A send waiting for a peer that
  // gave up on a dead member, and keeps its process and group, would
  // otherwise wait until the deadline.
  bool watch_members = false;
  // A wait with nothing else to do (a broadcast's reader): the pause
  // between its looks at the socket, where it spins
  // (Tuning::across_reader_gap_ns).  Transports that do not look by
  // system calls ignore it.
  std::chrono::nanoseconds look_gap{0};
};

// A link from this rank to one peer.  Calls come from one thread at a time
// (the group's).
class Channel {
 public:
  virtual ~Channel() = default;
  // Sends len bytes.  Buffered: returns once the bytes are copied out of
  // data, never waiting for the matching receive, except where the bytes
  // already buffered towards this peer exceed the transport's bound; then it
  // waits until the receiver has taken enough.  kRemote when the peer
  // failed, kTimeout past the deadline, kNoMemory when no buffer can be had.
  virtual Status send(const void* data, std::size_t len, const Wait& w) = 0;
  // Receives the next message from the peer into data (capacity max_len).
  // Blocks until it arrives: kRemote when the peer failed, kTimeout past the
  // deadline, kInvalidArgument when it is larger than max_len (the message
  // stays queued).
  virtual Status recv(void* data, std::size_t max_len, const Wait& w) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Whether this transport links this rank to group rank peer (the same
  // answer on both sides).
  virtual bool reaches(int peer) const = 0;
  // The channel to peer, owned by the transport; null when !reaches(peer).
  virtual Channel* channel(int peer) = 0;
};

}  // namespace accrun::collectives::store
