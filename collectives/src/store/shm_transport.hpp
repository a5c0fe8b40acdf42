// The shared-memory transport: one segment per group incarnation, mapped by
// every member (all on one host).
//
// Segment layout (all offsets page- or cache-line aligned):
//   Header                      magic, geometry, setup handshake
//   Ctrl[size]                  per rank: `seq`, a monotonic publish counter,
//                               two boxes, failure and departure flags
//   slots[size][2][half_bytes]  per rank: two halves, used alternately,
//                               each half a page into its pages (slot())
//   RingCtrl[size*size]         per ordered pair (src, dst): head/tail
//   rings[size*size][ring]      per ordered pair: a byte ring of frames
//   bring[3][slots]             group-wide broadcast rings (small, chunked,
//                               tiny): each slot a seq line + data, or
//                               (tiny) two 32-byte slots to a line
//
// The pair rings are the transport's Channels (ShmChannel): frames
// [len, kind, id] + payload; a message that does not fit the free space is
// written to a side file in shm_dir, reserved with posix_fallocate, and only
// its descriptor goes through the ring.  The bytes a sender keeps in side
// files towards one receiver are bounded (Tuning::pair_buffer_max): past the
// bound a send waits until the receiver has taken enough.
//
// The slots, boxes and broadcast rings are the shared-memory collectives'
// own (shm_collectives.cpp, which reaches them through this class).
//
// Setup: group rank 0 creates the file (0600, O_EXCL) in shm_dir, reserves
// its blocks with posix_fallocate (a pair's ring when its sender first
// writes it), publishes its path through the Rendezvous, waits
// until every member has mapped it and unlinks it, so nothing is left
// behind even if a rank crashes later.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "store/store_backend.hpp"
#include "store/transport.hpp"
#include "store/wait.hpp"

namespace accrun::collectives::store {

// Messages of at most kBoxBytes travel inside the cache line that also
// carries their sequence number (one line transfer per peer instead of two),
// with the call's signature (count, dtype, op, root) that readers check.
constexpr std::size_t kBoxBytes = 40;
struct alignas(64) Box {
  std::atomic<std::uint64_t> seq;
  std::uint64_t sig[2];
  char data[kBoxBytes];
};

struct alignas(128) Ctrl {
  std::atomic<std::uint64_t> seq;
  std::atomic<std::uint32_t> attached;
  std::int64_t pid;
  // The step (a value of seq) at which this rank entered a barrier, in the
  // line its waiters read anyway: a step of seq alone is any call's.
  std::atomic<std::uint64_t> barrier_seq;
  // The last broadcast this rank posted as its root (StoreGroup's count of
  // the group's broadcasts) and that call's signature, written first.
  std::atomic<std::uint64_t> bcast_posted;
  std::atomic<std::uint64_t> bcast_sig[2];  // relaxed; bcast_posted orders them
  // The broadcast this rank entered last (StoreGroup's count), as root or
  // reader: a member waiting for it in another call, having made fewer
  // broadcasts, knows the two called different collectives.
  std::atomic<std::uint64_t> bcast_entered;
  Box box[2];  // used by rounds of parity 0 and 1, like the slot halves
  // Set when this rank gave up on the group (a dead peer, a timeout), with
  // the reason, so ranks waiting on it fail at once instead of hanging.
  std::atomic<std::uint32_t> broken;
  char reason[1000];
  std::uint64_t probe_addr;        // an address in this process holding its pid (CMA probe)
  std::atomic<std::uint32_t> cma;  // 1: this rank can read its peer's memory, 2: it cannot
  // Where this rank is in a group across hosts (HierGroup writes them): its
  // count of collective calls on the whole group, since when
  // (coarse_now_ns()) it waits for another host, 0 while it does not, and
  // when it returned from its last such call, 0 while it is in one; a
  // member that times out waiting for it inside the host says so.
  std::atomic<std::uint64_t> outer_call;
  std::atomic<std::int64_t> across_since_ns;
  std::atomic<std::int64_t> outer_left_ns;
  // Broadcast ring chunks this rank has finished with, per ring (its own
  // line: the owner writes it once per chunk, roots read it before reusing
  // a slot).
  alignas(64) std::atomic<std::uint64_t> bc_done[3];
  // Bytes this rank has put in place as the root of streamed broadcasts
  // (StoreGroup::broadcast_stream), over all of them: its readers wait for
  // it to pass the end of the piece they read next.
  alignas(64) std::atomic<std::uint64_t> streamed;
};

// The head of a broadcast ring's slot: its stamp and the call's signature.
// The data follows it.
struct SlotHead {
  std::atomic<std::uint64_t> seq;  // chunk number + 1 of the chunk it holds
  std::uint64_t sig[2];
};

// One slot of the small and the chunked broadcast rings: a chunk of at most
// kBoxBytes lies in the line that carries its stamp and the call's
// signature, a larger one in the data that follows.
struct alignas(64) BSlot : SlotHead {
  char inline_data[kBoxBytes];
};

// One slot of the tiny ring (broadcasts of at most kTinyBytes): two slots to
// a cache line.  With a line per message a two-rank broadcast's root waits
// for a line from the reader's core every call; with two it sends the
// second message in a line it still holds, as the root runs ahead.
constexpr std::size_t kTinyBytes = 8;
struct alignas(32) TSlot : SlotHead {
  char data[kTinyBytes];
};
static_assert(sizeof(TSlot) == 32 && sizeof(BSlot) == 64);
// The broadcast rings (ShmTransport::bring).
enum BRing : int { kSmallRing = 0, kChunkRing = 1, kTinyRing = 2, kBRings = 3 };

// A broadcast ring's geometry in the segment.
struct BRingGeom {
  std::size_t off = 0, data = 0, stride = 0, slots = 0;
};

class ShmTransport;

// The channel from this rank to one peer over the pair rings.
class ShmChannel final : public Channel {
 public:
  ShmChannel(ShmTransport& t, int peer) : t_(t), peer_(peer) {}
  Status send(const void* data, std::size_t len, const Wait& w) override;
  Status recv(void* data, std::size_t max_len, const Wait& w) override;

 private:
  ShmTransport& t_;
  int peer_;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(const GroupContext& ctx, const Tuning& t, const Waiter& waiter);
  // Removes the side files of messages sent to this rank and never
  // received.
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  // Collective over the group's members.
  Status setup(Rendezvous* rv, int setup_timeout_ms, const std::string& shm_dir);

  const char* name() const override { return "shm"; }
  bool reaches(int peer) const override { return peer >= 0 && peer < size_; }
  Channel* channel(int peer) override { return reaches(peer) ? &channels_[static_cast<std::size_t>(peer)] : nullptr; }

  // ---- for the shared-memory collectives
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t half() const { return half_; }
  bool cma() const { return use_cma_; }  // every member can read every other's memory
  const Waiter& waiter() const { return waiter_; }
  // Whether this call's waits sleep on the host's doorbell until a member
  // publishes, instead of yielding the CPU by turns: on an oversubscribed
  // host, for calls long enough that the ranks waited for need the CPU
  // more than the waiter needs a quick wake-up (Tuning::across_sleep_min).
  void sleep_in_waits(bool on) { waiter_.sleep = on && waiter_.bell != nullptr; }
  // Wakes the members sleeping on the host's doorbell, where it has one
  // (Waiter::doorbell).  Called after each store another member may wait
  // for.
  void ring() const {
    if (waiter_.bell != nullptr) waiter_.bell->ring();
  }
  Ctrl& ctrl(int q) const { return reinterpret_cast<Ctrl*>(base() + ctrl_off_)[q]; }
  // A slot starts half a page into its pages, a page apart from the next:
  // a caller's large buffer usually starts 16 bytes into a page (malloc's
  // header) or at one, and a copy or a reduction between addresses the
  // same distance into their pages stalls every load behind the stores
  // just made (4K aliasing: on an AMD EPYC host the 2-rank allreduce of
  // 4-16 KiB took 2.5-3.4 times as long from such buffers).
  static constexpr std::size_t kSlotSkew = 2048;
  char* slot(int q, int h) const {
    return base() + slots_off_ + kSlotSkew +
           (static_cast<std::size_t>(q) * 2 + static_cast<std::size_t>(h)) * slot_stride_;
  }
  Box& box(int q, int h) const { return ctrl(q).box[h]; }
  const BRingGeom& bring(int which) const { return bring_[which]; }
  // Slot i (a chunk number modulo the ring's slots) of ring `which`.
  SlotHead* bslot(int which, std::size_t i) const {
    const BRingGeom& r = bring_[which];
    return reinterpret_cast<SlotHead*>(base() + r.off + i * r.stride);
  }
  // Copies len bytes at addr in group rank q's process into dst.
  Status cma_read(int q, char* dst, std::uint64_t addr, std::size_t len, const char* op) const;

  // Whether any member gave up on the group, or peer q (the one a call
  // waits on) failed.  Only q's liveness is checked (one look at
  // the monitor and one kill(pid, 0)); other members that fail are noticed
  // by the peers that wait on them, who then give up and flag it here.
  Status check_peer(int q, const char* op) const;
  // Whether any member gave up on the group (the flags alone).
  Status check_flags(const char* op) const;
  // Flags this rank as having given up, with the reason.
  void mark_broken(const Status& s);
  // The error for a wait on `missing` that reached its deadline.
  Status timed_out(const Wait& w, const std::vector<int>& missing) const;
  std::string where() const;
  std::string describe(int q) const;  // "group rank 2 (job rank 7)"

 private:
  friend class ShmChannel;
  struct Header;
  struct RingCtrl;
  struct Frame;
  char* base() const { return static_cast<char*>(seg_); }
  Header* header() const { return reinterpret_cast<Header*>(base()); }
  RingCtrl& ring_ctrl(int src, int dst) const;
  char* ring(int src, int dst) const {
    return base() + rings_off_ + static_cast<std::size_t>(src * size_ + dst) * ring_bytes_;
  }
  void ring_write(int src, int dst, std::uint64_t pos, const void* data, std::size_t len);
  void ring_read(int src, int dst, std::uint64_t pos, void* data, std::size_t len) const;
  std::string spill_path(int src, std::uint64_t id) const {
    return spill_prefix_ + "-p" + std::to_string(src) + "-" + std::to_string(id);
  }
  // Reserves [off, off + bytes) of the file; kNoMemory naming the file
  // system and its size when it is full.
  Status reserve(int fd, std::size_t off, std::size_t bytes, const std::string& path, const std::string& what) const;
  Status probe_cma(Clock::time_point deadline, int setup_timeout_ms);
  Status check_one(int q, const char* op) const;

  std::string name_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  std::vector<Member> members_;
  const PeerMonitor* peers_;
  Tuning tun_;
  Waiter waiter_;
  long self_pid_;
  std::string dir_;

  int fd_ = -1;  // the segment's file (unlinked once every member mapped it)
  std::vector<bool> ring_reserved_;  // per peer: this rank's ring towards it has its blocks
  void* seg_ = nullptr;
  std::size_t seg_bytes_ = 0;
  std::size_t half_ = 0, ring_bytes_ = 0;
  std::size_t slot_stride_ = 0;  // half_ and a page (slot())
  std::size_t ctrl_off_ = 0, slots_off_ = 0, rctrl_off_ = 0, rings_off_ = 0;
  BRingGeom bring_[kBRings];
  std::string spill_prefix_;
  std::uint64_t next_spill_id_ = 0;
  bool use_cma_ = false;
  std::vector<ShmChannel> channels_;
};

}  // namespace accrun::collectives::store
