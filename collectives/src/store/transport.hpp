// The store backend's transports.
//
// A store group moves data between its members over one of two kinds of
// link: the ranks of one host share a memory segment (ShmDomain, shm.hpp),
// and ranks on different hosts will talk through a Transport: a reliable,
// ordered byte link per peer.  The plain-TCP Transport (and the libfabric one
// behind ACCRUN_WITH_LIBFABRIC) is not built yet; until it is, a store group
// whose members span hosts fails at creation with kNotSupported.
#pragma once

#include <cstddef>

#include "accrun/status.hpp"

namespace accrun::collectives::store {

// A point-to-point link from this rank to every other member of a group on
// another host.  Calls come from one thread at a time (the group's).
class Transport {
 public:
  virtual ~Transport() = default;
  // Sends len bytes to peer (group rank).  Buffered: returns once the bytes
  // are handed to the link, never waiting for the matching receive.
  // kRemote when the peer's link broke, kTimeout past timeout_ms.
  virtual Status send(int peer, const void* data, std::size_t len, int timeout_ms) = 0;
  // Receives the next message from peer into data (capacity max_len); *len is
  // its size.  Blocks until it arrives: kRemote when the peer failed,
  // kTimeout past timeout_ms, kInvalidArgument when it is larger than max_len
  // (the message stays queued).
  virtual Status recv(int peer, void* data, std::size_t max_len, std::size_t* len, int timeout_ms) = 0;
};

}  // namespace accrun::collectives::store
