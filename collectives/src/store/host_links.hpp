// The store's links between hosts, as the hierarchical group uses them
// (hier_group.hpp): tagged, ordered, buffered messages to any member on
// another host.  Two implementations: plain TCP (tcp_transport.hpp, always
// built, the default) and libfabric (fabric_transport.hpp, with
// ACCRUN_WITH_LIBFABRIC; FI_EP_RDM on whatever provider libfabric picks or
// FI_PROVIDER names).  ACCRUN_STORE_TRANSPORT chooses (accrun(7)).
//
// Every call comes from the group's thread.  Failures: kRemote naming the
// member when its link breaks or the job reports it failed, kTimeout past
// the Wait's deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "store/transport.hpp"

namespace accrun::collectives::store {

class HostLinks {
 public:
  // The program's sends (kP2p) and the group's collectives (kCollective)
  // share a link without mixing.
  enum Tag : std::uint32_t { kP2p = 0, kCollective = 1 };

  virtual ~HostLinks() = default;
  virtual const char* name() const = 0;

  // Sends one message; buffered (never waits for its receive, up to the
  // transport's bound of bytes queued towards one peer).
  virtual Status send(int peer, Tag tag, const void* data, std::size_t len, const Wait& w) = 0;
  // Sends head then data as one message.  borrow: `data` may be sent from
  // where it lies; the caller keeps it unchanged until flush_link(peer) has
  // returned (or unborrow() after a failure).
  virtual Status send2(int peer, Tag tag, const void* head, std::size_t head_len, const void* data, std::size_t len,
                       const Wait& w, bool borrow = false) = 0;
  // Waits until nothing borrowed towards peer is still needed.
  virtual Status flush_link(int peer, const Wait& w) = 0;
  // After a failure: the caller's borrowed memory is its own again, at once.
  // The links may be unusable afterwards (the group is, anyway).
  virtual void unborrow() = 0;
  // Receives the next message of `tag` from peer; *got is its length.
  // kInvalidArgument (the message stays queued) when it exceeds max_len.
  virtual Status recv(int peer, Tag tag, void* data, std::size_t max_len, std::size_t* got, const Wait& w) = 0;
  // Receives the next message of `tag` from peer, whole.
  virtual Status recv_message(int peer, Tag tag, std::string* out, const Wait& w) = 0;
  // Receives the next message of `tag` from peer, expected to hold `keep`
  // bytes then `len`: the first go to *head and the rest straight into
  // `dest` (*placed true).  A message of another length lands whole in
  // *head (*placed false).  `dest` is not written after this returns.
  virtual Status recv_split(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, std::string* head,
                            bool* placed, const Wait& w) = 0;
  // One recv_split for each of several peers (each at most once), all
  // posted before any is waited for, so every message goes straight to its
  // `dest` whichever comes first; taken in the order given.  A failure ends
  // the call: the splits after it are not taken.
  struct Split {
    int peer;
    Tag tag;
    std::size_t keep;
    char* dest;
    std::size_t len;
    std::string head;
    bool placed = false;
  };
  virtual Status recv_splits(std::vector<Split>* splits, const Wait& w) {
    for (Split& s : *splits)
      ACCRUN_RETURN_IF_ERROR(recv_split(s.peer, s.tag, s.keep, s.dest, s.len, &s.head, &s.placed, w));
    return Status::ok();
  }
  // Waits until everything queued has left (best effort at destroy).
  virtual Status flush(const Wait& w) = 0;
  // The member destroys its group normally, after flush(): says so where a
  // member of another host waiting for a message from it, over a link it
  // never opened, can see it (TCP: the group's directory), so that wait
  // fails instead of waiting out the timeout.
  virtual void leaving() {}
  // "group rank 3 (job rank 7 on host n2)", for messages.
  virtual std::string describe(int peer) const = 0;
  // How far the link to `peer` got each way (messages, bytes queued or in
  // the kernel), for the log of a member that gives up; empty where the
  // transport does not say.
  virtual std::string link_state(int peer) {
    (void)peer;
    return std::string();
  }
  // Sets up the links to `peers` now, at group creation, where a transport
  // wants them made in a fixed order (TCP: one connection per pair).
  virtual Status pair_up(const std::vector<int>& peers, const Wait& w) {
    (void)peers;
    (void)w;
    return Status::ok();
  }
};

// "group rank 3 (job rank 7 on host n2)": a member, in messages.
inline std::string describe_member(const std::vector<Member>& members, int peer) {
  const Member& m = members[static_cast<std::size_t>(peer)];
  return "group rank " + std::to_string(peer) + " (job rank " + std::to_string(m.job_rank) + " on host " + m.host + ")";
}

// The value another member published under `key` (its address), waited
// for until w's deadline but no longer than the job reports that member
// alive (`peers`, may be null): a member that died before publishing fails
// the wait within a fraction of a second, kRemote with the job's word (the
// caller names the member).
Result<std::string> lookup_published(Rendezvous* rv, const std::string& key, const PeerMonitor* peers,
                                     const std::vector<Member>& members, int peer, const Wait& w);

// The links a group's member needs: to every member q with needs[q] (those
// on other hosts).  `transport` is "tcp" or "libfabric"; anything else, or
// libfabric in a build without it, is kInvalidArgument / kNotSupported.
Result<std::unique_ptr<HostLinks>> make_host_links(const std::string& transport, const GroupContext& ctx,
                                                   std::vector<bool> needs, std::size_t pair_buffer_max);

}  // namespace accrun::collectives::store
