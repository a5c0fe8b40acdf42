// A store group whose members span hosts: hierarchical collectives.
//
// The members of each host form a store group of their own over shared
// memory (group.hpp); the lowest group rank on each host is its leader, and
// the leaders talk over TCP or libfabric (host_links.hpp).  A collective reduces (or
// gathers) inside each host, runs between the leaders, then broadcasts
// inside each host:
//   allreduce      local reduce to the leader; leaders exchange every
//                  leader's vector and reduce in host order (while each
//                  leader sends at most kSmallBytes; between a power of two
//                  hosts above 2, recursive doubling instead), or reduce-scatter + allgather:
//                  recursive halving and doubling for a power of two hosts (more than 2), else a
//                  ring; local broadcast. In lanes, from kLanesMinBytes, where every host has the
//                  same number of members and all of them can read each
//                  other's memory (agreed at set-up): each member reduces
//                  its slice of the host's vectors, the members with the same
//                  local index on every host (a lane) reduce that slice
//                  between the hosts as the leaders would the whole, and
//                  then each member reads the others' slices.  Every member
//                  of the host moves and reduces its share, in parallel,
//                  instead of the leader alone.
//   reduce         as allreduce between the leaders, then the root's
//                  leader hands the result to the root (a broadcast inside
//                  the root's host: the point-to-point channel carries the
//                  program's own sends)
//   broadcast      up to kSmallBytes: the root broadcasts inside its host,
//                  its leader sends the data down a binomial tree of
//                  leaders, each passing it on before it broadcasts inside
//                  its own host.  Above: down a chain of leaders from the root's
//                  host in chunks (Tuning::chain_chunk, or
//                  chain_chunk_oversubscribed where any host is), each host broadcasting a chunk
//                  inside as soon as its leader has it (on the root's host,
//                  the root broadcasts it and the leader passes it on); where
//                  the host's members read each other's memory, one streamed
//                  broadcast per host (StoreGroup::broadcast_stream): the
//                  members read each chunk from the leader's buffer as it is
//                  posted, and the leader waits for them only at the end
//   allgather      local allgather; leaders exchange host blocks (by
//                  recursive doubling between a power of two hosts above 2
//                  while the whole is at most kSmallBytes / 4); local
//                  broadcast of the whole.  In lanes (as allreduce) where the
//                  whole exceeds kLanesAllgatherMinBytes: each member swaps its block
//                  with its lane on the other hosts, then the members of a
//                  host read each other's lanes' blocks
//   reducescatter  allreduce of the whole, then each keeps its block
//   barrier        local barrier, leaders exchange (recursive doubling
//                  between a power of two hosts above 2), local barrier
// Every leader message carries the call's signature, so leaders that
// disagree on a collective's count, type, op or root fail naming both
// sides.  A leader whose part between hosts fails gives up on its host's
// segment, so the ranks of its host fail too instead of waiting.
// Send and recv go over shared memory inside a host and over TCP between
// hosts; both are buffered (accrun_send(3)).  Results are bit-identical on
// every member: each element is reduced once, in one place.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "store/group.hpp"
#include "store/host_links.hpp"

namespace accrun::collectives::store {

class HierGroup final : public Backend {
 public:
  static constexpr std::size_t kSmallBytes = 64 * 1024;
  // From this size up, an allreduce between hosts whose members all read
  // each other's memory, each host with the same number of members, runs in
  // lanes (see the top of the file).
  static constexpr std::size_t kLanesMinBytes = 64 * 1024;
  // An allgather runs in lanes where the whole exceeds this.  Each member
  // then sends only its own block between the hosts, instead of its leader
  // sending the host's: on the test bed, 2 x 2 and 4 x 2, lanes were faster
  // from a whole of 32 KiB up (at 64 KiB, 2 x 2: 0.58 of the leaders'
  // exchange) and slower at 16 KiB (benchmarks/README.md).
  static constexpr std::size_t kLanesAllgatherMinBytes = 16 * 1024;

  HierGroup(const GroupContext& ctx, const Tuning& t);
  ~HierGroup() override;
  Status setup(const GroupContext& ctx, int setup_timeout_ms);

  BackendKind kind() const override { return BackendKind::kStore; }
  void set_timeout(int timeout_ms) override;

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

 private:
  struct Sig {  // the call, as leaders compare it
    std::uint32_t coll = 0, dtype = 0, op = 0;
    std::int32_t root = 0;
    std::uint64_t count = 0;
    // The sender's count of collective calls on the group, this one
    // included: a member that skipped or added one (a call refused on it
    // alone, a loop that ran once more) is told at its first message
    // instead of being matched with another call of the same kind.
    std::uint64_t call = 0;
  };
  // allreduce's body, the call signed as `sig` (reducescatter runs it too).
  Status allreduce_as(const Sig& sig, const void* send, void* recv, std::size_t count, DType dt,
                      Op op);
  struct PendingRecv {
    void* buf;
    std::size_t bytes;
    int peer;
  };

  Status setup_links(const GroupContext& ctx, int setup_timeout_ms);  // setup, after the host's segment
  Status enter(const char* op, void* stream, bool collective);
  Status check_rank(int r, const char* what) const;
  // kInvalidArgument where count blocks of `per` elements of dt overflow
  // (as the group inside a host refuses them).
  Status check_count(std::size_t count, std::size_t per, DType dt) const;
  // A collective's wait: the group's timeout, and a member of this host
  // that gave up (the group is unusable, and it may have given up waiting
  // for this member); asleep where the call is long (p2p_wait_spec).
  Wait wait_spec() const;
  // A send's or receive's of `bytes`: the group's timeout; on an
  // oversubscribed host, from Tuning::across_sleep_min bytes, blocking in poll at
  // once rather than yielding by turns.
  Wait p2p_wait_spec(std::size_t bytes) const;
  bool leader() const { return local_rank_ == 0; }
  int local_index(int group_rank) const;
  // Failures inside a collective leave the members out of step: later
  // calls return the same error, and the host's members are told.
  Status fail(Status s);
  Status run(Status s) { return s.is_ok() ? s : fail(std::move(s)); }
  // A send or flush to `host` that found the link lost (kRemote): the
  // message that member sent before it closed, if it explains why (its
  // abort notice, a call that does not match), else `s`.
  Status why_lost(int host, Status s);
  Status speaks_for(Status s, int host) const;

  // Between the members of one lane (lane_: the local index; the leaders'
  // lane is 0) on the hosts (host indices), tag kCollective, each message
  // led by the call's signature.
  // borrow: sent from `data` itself, which must not change before
  // lflush(host) (see HostLinks::send2).
  int lane_peer(int host) const {
    return hosts_[static_cast<std::size_t>(host)][static_cast<std::size_t>(lane_)];
  }
  Status agree(bool oversubscribed, int setup_timeout_ms);
  bool doubling(std::size_t bytes, std::size_t most) const;
  Status lsend(int host, const void* data, std::size_t len, const Wait& w, bool borrow = false);
  Status lflush(int host, const Wait& w);
  Status lrecv(int host, void* data, std::size_t len, const Wait& w);
  struct Into {  // a host's message for lrecv_all: `len` bytes into `dest`
    int host;
    char* dest;
    std::size_t len;
  };
  Status lrecv_all(const std::vector<Into>& from, const Wait& w);
  Status check_split(int from, const std::string& head, bool placed, std::size_t len);
  Status lrecv_any(int host, std::string* out, const Wait& w);
  Status check_sig(int from, const std::string& message);
  Status leaders_allreduce(char* buf, std::size_t count, DType dt, Op op);
  Status leaders_broadcast(char* buf, std::size_t bytes, int root_host);
  Status leaders_exchange(const char* mine, std::size_t mine_len, std::vector<std::string>* theirs, const Wait& w);
  // The debug log says which algorithm the collective in sig_ takes between
  // the hosts, whenever it differs from its last call's.
  void say_algorithm(const char* algorithm, std::size_t bytes);

  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  int timeout_ms_ = -1;
  std::vector<Member> members_;
  std::vector<int> host_of_;                // group rank -> host index
  std::vector<std::vector<int>> hosts_;     // host index -> its group ranks, ascending
  int my_host_ = 0;
  int local_rank_ = 0;
  int lanes_ = 1;  // members per host when allreduce may run in lanes, else 1
  std::size_t chain_chunk_ = 0;          // a large broadcast's chunk between hosts (agree())
  std::size_t chain_chunk_crowded_ = 0;  // Tuning::chain_chunk_oversubscribed
  int lane_ = 0;   // the lane the messages between hosts are on now
  bool in_lanes_ = false;  // inside an allreduce's step between hosts in lanes
  std::unique_ptr<Rendezvous> local_rv_;    // the host group's keys, under the host's prefix
  std::unique_ptr<StoreGroup> local_;
  std::size_t pair_buffer_max_ = 0;       // Tuning::pair_buffer_max, towards each member of another host
  std::size_t sleep_min_ = 0;             // Tuning::across_sleep_min
  std::chrono::nanoseconds reader_gap_{0};  // Tuning::across_reader_gap_ns
  std::unique_ptr<HostLinks> links_;      // to the other hosts: tcp or libfabric
  Sig sig_;
  Sig prev_sig_;  // the call before (a broadcast's root, against a late message)
  const char* op_ = "setup";
  Status broken_;
  int told_by_ = -1;  // the host whose word of giving up failed this member, if one did
  int depth_ = 0;
  std::uint64_t calls_ = 0;  // collective calls entered (Sig::call)
  std::vector<PendingRecv> pending_;
  // Scratch of the collectives, kept between calls, grown when a call needs
  // more and never cleared.  (Allocated per call, a buffer of some MiB came
  // from malloc as fresh pages every call, malloc handing such blocks back
  // to the system when freed: 4 hosts x 2 ranks, an allreduce of 4 MiB took
  // 3.4 times as long, its time in page faults.)
  class Scratch {
   public:
    char* get(std::size_t n) {
      if (n > size_) {
        buf_ = std::make_unique_for_overwrite<char[]>(n);
        size_ = n;
      }
      return buf_.get();
    }

   private:
    std::unique_ptr<char[]> buf_;
    std::size_t size_ = 0;
  };
  Scratch acc_;  // the leaders' receives and reductions, allgather's host block
  Scratch tmp_;  // what a call holds across one that uses acc_ (reduce, reducescatter)
  static constexpr std::uint32_t kSaid = 8;
  const char* said_[kSaid] = {};  // per collective, the algorithm last logged
  bool said_lanes_[kSaid] = {};   // and whether it ran in lanes
};

}  // namespace accrun::collectives::store
