// A store group: the Backend that runs the store's algorithms for one
// incarnation of a group.
//
// The algorithms live one family per file:
//   p2p.cpp        send, recv, group_start/end: over each peer's Channel
//   reduce.cpp     allreduce, reduce, reducescatter
//   broadcast.cpp  broadcast
//   allgather.cpp  allgather, barrier
// and reach their peers through the transports (transport.hpp); the
// collectives run over the shared-memory transport's rounds, described here.
//
// Rounds.  Collectives run as a sequence of rounds.  In a round a rank may
// write into its own current half, then publishes (seq += 1, release);
// readers wait for the writer's seq (acquire) and read.  Small rounds also
// stamp the rank's box of the half with the value first (publish_box), and
// their readers wait on that stamp: the box's line holds the signature they
// check.  Every rank publishes the same number of times in every
// collective, so seq values line up across ranks.  A half is written again
// two rounds later, and only once every rank has published the value it
// published first after the earlier round — a rank publishes that only after
// finishing its reads — as its seq shows, or its box: a member that saw every
// box at a value knows as much (saw_all).  So no extra synchronisation is
// needed and consecutive rounds pipeline.
//
// Signatures.  The first round of every collective carries the call's
// signature (which collective, count, dtype, op, root) in the rank's box;
// every rank that reads a peer's data in that round compares it with its
// own, and a mismatch fails the call naming both sides.  The rank that sees
// it gives up (flags the segment), so every member fails at this call or,
// for a member that returned without reading (a reduce's non-root, a
// broadcast's root), at its next one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "accrun/backend.hpp"
#include "store/shm_transport.hpp"
#include "store/store_backend.hpp"

namespace accrun::collectives::store {

// The bytes of `count` blocks of `per` elements of `ds` bytes, into *bytes:
// false where that overflows or passes SIZE_MAX / 8 (a count no buffer can
// have).  Every store group refuses such a count the same way.
inline bool count_bytes(std::size_t count, std::size_t per, std::size_t ds, std::size_t* bytes) {
  std::size_t elems;
  return !__builtin_mul_overflow(count, per, &elems) && !__builtin_mul_overflow(elems, ds, bytes) &&
         *bytes <= SIZE_MAX / 8;
}

class StoreGroup final : public Backend {
 public:
  // `across`: the host's part of a group across hosts (HierGroup), whose
  // long calls wait asleep (Tuning::across_sleep_min).
  StoreGroup(const GroupContext& ctx, const Tuning& t, bool across = false);
  Status setup(Rendezvous* rv, int setup_timeout_ms, const std::string& shm_dir);

  BackendKind kind() const override { return BackendKind::kStore; }
  void set_timeout(int timeout_ms) override { timeout_ms_ = timeout_ms; }

  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) override;
  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) override;
  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override;
  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) override;
  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op,
                       void* stream) override;
  Status barrier() override;
  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override;
  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override;
  Status group_start() override;
  Status group_end() override;

  // Makes the group unusable with `why`, and tells the other members
  // through the segment, so their waits end with it (a host's leader whose
  // part between hosts failed, hier_group.cpp).
  void give_up(const Status& why) { (void)guard(why); }
  // Whether a member gave up on the group: its reason, as the error of the
  // caller's `op` (a host's leader waiting for another host checks it, so a
  // member that gave up inside the host ends that wait too).
  Status gave_up(const char* op) const { return shm_->check_flags(op); }

  // Whether every member can read every other's memory (cross-memory
  // attach), which allreduce_around needs.
  bool cma() const { return shm_->cma(); }
  // An allreduce with a step of the caller's between its halves, for a
  // group whose members also reduce across hosts (hier_group.cpp): member r
  // reduces its slice of every member's `send` into `recv`, then calls
  // between(recv + first element of the slice, its elements), which may
  // reduce that slice further in place (with the same slice of the other
  // hosts), then every member reads the others' slices from their owners.
  // The slices depend only on count, dtype and the group's size.  Needs
  // cma(); a failure of `between` is returned as it is (the caller gives
  // up on the group).
  using Between = std::function<Status(char* slice, std::size_t count)>;
  Status allreduce_around(const void* send, void* recv, std::size_t count, DType dt, Op op, const Between& between);
  // Every member's `buf` has the same layout, and member q holds the byte
  // ranges owned(q, &ranges) lists (offset, length); afterwards every member
  // holds all of them (a hierarchical allgather in lanes: each member has
  // its lane's blocks from the other hosts).  One round by cross-memory
  // attach (on an oversubscribed host, rounds through the slots:
  // share_in_rounds); `count` and `dt` are the call's, for the signature.
  // Needs cma().
  using Owned = std::function<void(int q, std::vector<std::pair<std::size_t, std::size_t>>* ranges)>;
  Status share_ranges(char* buf, std::size_t count, DType dt, const Owned& owned);
  // A broadcast of `count` elements that are part of a broadcast of
  // `whole` (a hierarchical broadcast's chunk): members that disagree on
  // the whole fail at the first part, naming both calls.
  Status broadcast_part(void* buf, std::size_t count, DType dt, int root, std::size_t whole);
  // Both's work once the call is entered.
  Status broadcast_entered(void* buf, std::size_t count, DType dt, int root, std::size_t whole);
  // A broadcast whose root gets its data in pieces while the others read
  // it (a hierarchical broadcast: the host's leader receives it from
  // another host), by cross-memory attach.  The root posts its buffer's
  // address once, then each piece as soon as fill(off, n) has put it in
  // place (fill null: the data is all there), and waits for its readers
  // only at the end; a reader reads what is posted as it comes.  after(off,
  // n), where set, runs on every rank once [off, off + n) is in its buffer
  // (a reader then reads piece by piece).  Pieces are `piece` bytes, a
  // multiple of the dtype's size.  Needs cma(); a failure of fill or after
  // is returned as it is (the caller gives up on the group).
  using Piece = std::function<Status(std::size_t off, std::size_t n)>;
  Status broadcast_stream(void* buf, std::size_t count, DType dt, int root, std::size_t piece, const Piece& fill,
                          const Piece& after);
  // The root a hierarchical group's call names, in its own ranks (-1: none),
  // signed into this group's calls until changed in place of their local
  // root: members of a host that disagree on a root elsewhere fail too.
  void sign_root_as(int root) { outer_root_ = root; }
  enum class Coll : std::uint8_t {
    kAllreduce = 1,
    kReduce,
    kBroadcast,
    kAllgather,
    kReducescatter
  };
  // The call a hierarchical group's member makes (c and its count; c 0:
  // none), signed into this group's calls until changed in place of their
  // own kind and count: an allreduce and a reducescatter are the same
  // reduce inside a host, and members of a host that call one each would
  // otherwise agree there.
  void sign_call_as(Coll c, std::size_t count) {
    outer_coll_ = c;
    outer_count_ = count;
  }
  // Where this member is in the group across hosts (Ctrl::outer_call,
  // Ctrl::across_since_ns), for its host's members' timeout messages.
  void note_outer_call(std::uint64_t call);
  // Whether this member is inside a collective call on the group across
  // hosts (Ctrl::outer_left_ns: the time it returned, 0 while inside).
  void note_in_outer_call(bool inside);
  void note_across(bool waiting);

 private:
  // ---- argument checks and error state (group.cpp)
  Status enter(const char* op, void* stream);
  Status check_p2p(const char* op, void* stream, int peer);
  Status check_rank(int r, const char* what) const;
  Status check_buffers(const void* a, const void* b, std::size_t count, std::size_t ds) const;
  // A failure inside a collective leaves the ranks' counters out of step, so
  // the group cannot be used again: later calls return the same error.
  Status guard(Status s);
  std::string where() const { return shm_->where(); }
  Wait wait_spec() const;
  Channel* channel(int peer) { return shm_->channel(peer); }

  // ---- signatures
  void sign(Coll c, std::size_t count, DType dt, Op op, int root);
  Status check_sig(int q, const std::uint64_t* theirs);
  Status roots_differ(int q);  // bcast_roots_ differs from q's
  // The group broken by members whose calls differ in kind or order:
  // "this rank called <mine>, <theirs>; every member must make the same
  // calls in the same order".
  Status out_of_order(const std::string& mine, const std::string& theirs);
  Status check_box_sig(int q, int h) { return check_sig(q, shm_->box(q, h).sig); }
  Status check_all_sigs(int h);
  // with_calls: also how many broadcasts the member made before the call.
  static std::string describe_sig(const std::uint64_t* sig, bool with_calls = false);

  // ---- rounds over the shared-memory transport
  std::uint64_t publish();
  std::uint64_t publish_box(int h);  // publishes bytes placed in this rank's box h
  char* box(int q, int h) const { return shm_->box(q, h).data; }
  char* slot(int q, int h) const { return shm_->slot(q, h); }
  // Starts a data round: stamps the call's signature, and a rank about to
  // write its half first waits until every reader is done with its
  // previous use.
  int begin_round();
  void end_round();
  // Elements per chunk of a chunked call: chunk_bytes, or where it is 0
  // round_bytes over the members (at least 64 KiB), within one half.
  std::size_t chunk_elems(std::size_t chunk_bytes, std::size_t round_bytes, std::size_t ds) const;
  // Rank q's slice of an n-element chunk, in cache-line multiples.
  std::pair<std::size_t, std::size_t> slice(std::size_t n, std::size_t ds, int q) const;
  // out = part(0) op part(1) op ... op part(size_ - 1), in rank order, so
  // every rank reducing the same parts gets bit-identical results.  out may
  // be part(0) and overlaps no other part; the first two parts are reduced
  // straight into it (no pass copying part(0) there first).
  template <class Part>
  void reduce_parts(DType dt, Op op, void* out, std::size_t count, Part part) const {
    if (size_ == 1) {
      if (out != part(0)) std::memcpy(out, part(0), count * dtype_size(dt));
      return;
    }
    reduce_pair(dt, op, out, part(0), part(1), count);
    for (int q = 2; q < size_; ++q) reduce_into(dt, op, out, part(q), count);
  }
  Status wait_all(std::uint64_t v);
  // Member q's control line (wait_one) or box h (wait_box) at v, in a round
  // every member publishes: a timeout names every member not there yet
  // (for wait_box, unless !every_late: a wait on one member alone).
  Status wait_one(int q, std::uint64_t v);
  Status wait_box(int q, int h, std::uint64_t v, bool every_late = true);
  template <class Stamp>
  Status wait_member(int q, std::uint64_t v, bool every_late, Stamp stamp);
  // The members whose stamp(q) is below v.
  template <class Stamp>
  std::vector<int> late(std::uint64_t v, Stamp stamp) const;
  // Every other member's box h at v, their signatures checked (a timeout
  // names every member whose box is not there yet); then every member is
  // known to have published v (saw_all).
  Status wait_boxes(int h, std::uint64_t v);
  // Every member's stamp(q) at v; a member seen missing is checked for
  // liveness and for a call elsewhere; the timeout names every one missing.
  template <class Stamp>
  Status wait_every(std::uint64_t v, Stamp stamp);
  // This member saw every member's publication of v (a seq or a box).
  void saw_all(std::uint64_t v) { known_min_ = std::max(known_min_, v); }
  // Every rank finished broadcast chunk v - 1; called only where
  // bring_[which].known_min < v.
  Status wait_bc_done(int which, std::uint64_t v);
  // A broadcast's steps (broadcast.cpp): its signature with the group's
  // count of broadcasts, entered; the root's post of it (bcast_sig, posted);
  // in a single-copy round, the root's box of `len` bytes (its buffer's
  // address) posted, a reader's wait for it, and the round's end (the root
  // waits for every reader and checks their signatures).
  void sign_broadcast(std::size_t whole, DType dt, int root);
  void mark_posted();
  void post_broadcast(int h, const void* what, std::size_t len);
  Status read_root_box(int root, int h, void* out, std::size_t len);
  Status end_single_copy(int root, int h);
  // The address rank q published in its box h (round value v), its
  // signature checked: where a cross-memory-attach read finds q's buffer.
  Status peer_address(int q, int h, std::uint64_t v, std::uint64_t* addr);
  Status reduce_to(const char* in, char* out, std::size_t count, DType dt, Op op, int root);  // root < 0: all
  Status allreduce_cma(const char* in, char* out, std::size_t count, DType dt, Op op,
                       const Between* between = nullptr);
  Status share_in_rounds(char* buf, const Owned& owned);  // share_ranges' rounds through the slots

  struct PendingRecv {
    void* buf;
    std::size_t bytes;
    int peer;
  };

  int rank_;
  int size_;
  int timeout_ms_;
  Tuning tun_;
  std::unique_ptr<ShmTransport> shm_;

  std::uint64_t sig_[2] = {0, 0};   // the current call's signature
  std::uint64_t seq_ = 0;          // this rank's last published value
  std::uint64_t round_ = 0;        // data rounds so far; the half is round_ & 1
  std::uint64_t reuse_need_[2] = {0, 0};
  // Every rank is known to have published at least this (in its seq, or
  // in a box stamped with it): begin_round need not look.
  std::uint64_t known_min_ = 0;
  // The broadcast rings (BRing): tiny, small, chunked.
  struct BRingState {
    std::uint64_t step = 0;       // chunks through this ring so far (the same on every rank)
    std::size_t slot = 0;         // step modulo the ring's slots (no division per chunk)
    std::uint64_t known_min = 0;  // every rank's bc_done for it is known to be at least this
  };
  BRingState bring_[kBRings];
  std::uint64_t streamed_ = 0;  // Ctrl::streamed, this rank's
  // This member's broadcasts on the group so far (broadcast_part calls): the
  // same count on every member making the same calls.  Stamped into a
  // broadcast's signature (kCallShift) so that a member whose call went
  // another way is caught.
  // Every other call's signature carries it too, so a member that skipped
  // or added a broadcast fails at its next call that meets the others'.
  std::uint64_t bcast_calls_ = 0;
  static constexpr int kCallShift = 48;
  // A fingerprint of the roots this member's broadcasts named, in every
  // signature (kRootsShift) and barrier mark: two members that both took
  // themselves for a broadcast's root and stamped its slot at the same
  // moment (a root stamps with a plain store, no compare-and-swap: see
  // broadcast.cpp) fail at their next call that meets the others'.
  std::uint8_t bcast_roots_ = 0;
  static constexpr int kRootsShift = 32;
  static constexpr int kNoOuterRoot = -2;
  int outer_root_ = kNoOuterRoot;  // sign_root_as
  Coll outer_coll_{};              // sign_call_as
  std::size_t outer_count_ = 0;
  // Fails when the root has posted broadcast `call` (or, for a chunk past
  // the first, a later one) while `ready` still says this member's place
  // for it is empty: the root's call went another way.
  template <class Ready>
  Status root_went_elsewhere(int root, std::uint64_t call, bool first_chunk, Ready ready);
  // For a wait on member q in a round: q's failure, or q in a broadcast
  // this member never made (while `ready` still says q has not come).
  template <class Ready>
  Status peer_elsewhere(int q, Ready ready);
  const char* op_ = "setup";
  bool ok_ = true;
  Status broken_;
  int group_depth_ = 0;
  std::vector<PendingRecv> pending_;
};

}  // namespace accrun::collectives::store
