// The MPI backend (ACCRUN_BACKEND_MPI): a named group is an MPI communicator
// made with MPI_Comm_create_group over its members in group-rank order.
//
// Fast path: outside accrun_group_start/end and without a timeout (0 or
// negative, accrun_group_set_timeout(3)), every call but send is the
// matching blocking MPI call, so the cost over calling MPI directly is
// one virtual call and a type lookup.  Inside a group_start/end bracket, or
// with a timeout set, operations are posted non-blocking and completed at
// group_end (or at once) by a wait loop that watches the deadline and the
// job's failure notices, so a dead peer or a lost partner is an error, not a
// hang.
//
// Sends never wait for their matching receive (as on the store): outside a
// bracket, accrun_send copies the message into a buffer of its own and posts
// MPI_Isend from it; completed sends are reaped on later calls and at
// destroy.  The bytes in flight towards one peer are bounded
// (kMaxInflightBytes); a send past the bound waits until earlier ones to
// that peer complete.  Inside a bracket sends are posted from the caller's
// buffer and complete at group_end, as before.
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"
#include "accrun/log.hpp"

namespace accrun::collectives {
namespace {

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}


// float16 and bfloat16 have no MPI type: they travel as 2-byte contiguous
// types and reduce through MPI_Op_create ops that call reduce_into.  A user
// op gets no user data, so each (type, op) pair is its own instantiation.
template <DType D, Op O>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduce_into(D, O, inout, in, static_cast<std::size_t>(*len));
}

struct HalfTypes {
  MPI_Datatype f16 = MPI_DATATYPE_NULL;
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op f16_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bf16_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

template <DType D>
void make_ops(MPI_Op* ops) {
  MPI_Op_create(&half_reduce<D, Op::kSum>, 1, &ops[0]);
  MPI_Op_create(&half_reduce<D, Op::kProd>, 1, &ops[1]);
  MPI_Op_create(&half_reduce<D, Op::kMin>, 1, &ops[2]);
  MPI_Op_create(&half_reduce<D, Op::kMax>, 1, &ops[3]);
}

// Created once, after MPI_Init, on the first MPI group; MPI_Finalize frees
// them.  MPI handles are process-wide by nature, so this is a process-wide
// read-only table once built.
const HalfTypes& half_types() {
  static const HalfTypes t = [] {
    HalfTypes h;
    MPI_Type_contiguous(2, MPI_BYTE, &h.f16);
    MPI_Type_commit(&h.f16);
    MPI_Type_set_name(h.f16, "accrun_float16");
    MPI_Type_contiguous(2, MPI_BYTE, &h.bf16);
    MPI_Type_commit(&h.bf16);
    MPI_Type_set_name(h.bf16, "accrun_bfloat16");
    make_ops<DType::kFloat16>(h.f16_ops);
    make_ops<DType::kBFloat16>(h.bf16_ops);
    return h;
  }();
  return t;
}

MPI_Datatype to_mpi_type(DType dt, const HalfTypes& h) {
  switch (dt) {
    case DType::kInt8: return MPI_INT8_T;
    case DType::kUInt8: return MPI_UINT8_T;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kFloat16: return h.f16;
    case DType::kBFloat16: return h.bf16;
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op to_mpi_op(Op op, DType dt, const HalfTypes& h) {
  const int i = static_cast<int>(op);
  if (dt == DType::kFloat16) return h.f16_ops[i];
  if (dt == DType::kBFloat16) return h.bf16_ops[i];
  switch (op) {
    case Op::kSum: return MPI_SUM;
    case Op::kProd: return MPI_PROD;
    case Op::kMin: return MPI_MIN;
    case Op::kMax: return MPI_MAX;
  }
  return MPI_OP_NULL;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

// Below MPI_THREAD_MULTIPLE, MPI may be entered by one thread at a time only.
// Calls on one group are serialised by the runtime, but two groups used from
// two threads are not: so while MPI groups exist, they must all belong to the
// thread that created the first.  MPI's thread level is process-wide, hence
// this process-wide record.
class ThreadGuard {
 public:
  static ThreadGuard& instance() {
    static ThreadGuard g;
    return g;
  }
  Status enter(int level) {
    std::lock_guard<std::mutex> lock(mu_);
    if (level == MPI_THREAD_MULTIPLE) {
      ++live_;
      return Status::ok();
    }
    const auto self = std::this_thread::get_id();
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    const char* fix =
        "; using MPI groups from several threads needs MPI_THREAD_MULTIPLE: initialise MPI with "
        "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or accrun_init_mpi()";
    if (level <= MPI_THREAD_FUNNELED && is_main == 0) {
      return invalid_usage(std::string("MPI was initialised with ") + thread_level_name(level) +
                           " and this is not its main thread" + fix);
    }
    if (live_ > 0 && owner_ != self) {
      return invalid_usage(std::string("MPI was initialised with ") + thread_level_name(level) +
                           " and another thread already holds an MPI group" + fix);
    }
    owner_ = self;
    ++live_;
    return Status::ok();
  }
  void leave() {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_ > 0) --live_;
  }

 private:
  std::mutex mu_;
  int live_ = 0;
  std::thread::id owner_;
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string describe_member(const GroupContext& ctx, int grank) {
  const Member& m = ctx.members[static_cast<std::size_t>(grank)];
  return "group rank " + std::to_string(grank) + " (job rank " + std::to_string(m.job_rank) +
         " on host " + (m.host.empty() ? std::string("?") : m.host) + ")";
}

// A buffered send in flight: its request and the copy it is sent from.
struct Outgoing {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<char> data;
  int peer = 0;
};

// Buffered sends left unfinished at destroy (a peer that never received):
// MPI may still read their copies, so they are kept for the process's life.
std::vector<std::vector<char>>& abandoned_sends() {
  static auto* v = new std::vector<std::vector<char>>();
  return *v;
}

// A result buffer to copy out at completion (reducescatter whose output lies
// inside its input, a layout MPI does not accept).
struct PendingCopy {
  std::vector<char> tmp;
  void* dst = nullptr;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(const GroupContext& ctx, MPI_Comm comm)
      : name_(ctx.name),
        epoch_(ctx.epoch),
        rank_(ctx.rank),
        size_(ctx.size),
        members_(ctx.members),
        oversubscribed_(ctx.oversubscribed),
        timeout_ms_(ctx.timeout_ms),
        peers_(ctx.peers),
        rendezvous_(ctx.rendezvous),
        comm_(comm),
        half_(half_types()) {}

  ~MpiBackend() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin == 0) {
      // Buffered sends finish before the communicator goes (a receiver may
      // still be on its way), at most for the group's timeout and never
      // for a failed peer; what is left stays with MPI.
      if (broken_.is_ok() && !outgoing_.empty()) (void)drain_sends(-1, 0, "destroy");
      for (Outgoing& o : outgoing_) {
        MPI_Request_free(&o.req);
        abandoned_sends().push_back(std::move(o.data));
      }
      outgoing_.clear();
      // Requests left behind by a timeout cannot be freed (MPI forbids it for
      // collectives); the communicator is freed all the same so its handle
      // does not leak, and MPI completes the operation if it ever can.
      MPI_Comm_free(&comm_);
    }
    ThreadGuard::instance().leave();
  }

  BackendKind kind() const override { return BackendKind::kMpi; }
  void set_timeout(int timeout_ms) override { timeout_ms_ = timeout_ms; }

  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op,
                   void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("allreduce", count, stream));
    const void* sb = send == recv ? MPI_IN_PLACE : send;
    const int n = static_cast<int>(count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    MPI_Op o = to_mpi_op(op, dt, half_);
    arrive(false);
    if (blocking()) return rc_status("MPI_Allreduce", MPI_Allreduce(sb, recv, n, t, o, comm_));
    MPI_Request r;
    return post("MPI_Iallreduce", MPI_Iallreduce(sb, recv, n, t, o, comm_, &r), &r);
  }

  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root,
                void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("reduce", count, stream));
    ACCRUN_RETURN_IF_ERROR(check_rank("reduce", "root", root));
    const void* sb = (send == recv && rank_ == root) ? MPI_IN_PLACE : send;
    const int n = static_cast<int>(count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    MPI_Op o = to_mpi_op(op, dt, half_);
    arrive(true);
    if (blocking()) return rc_status("MPI_Reduce", MPI_Reduce(sb, recv, n, t, o, root, comm_));
    MPI_Request r;
    return post("MPI_Ireduce", MPI_Ireduce(sb, recv, n, t, o, root, comm_, &r), &r);
  }

  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("broadcast", count, stream));
    ACCRUN_RETURN_IF_ERROR(check_rank("broadcast", "root", root));
    const int n = static_cast<int>(count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    arrive(true);
    if (blocking()) return rc_status("MPI_Bcast", MPI_Bcast(buf, n, t, root, comm_));
    MPI_Request r;
    return post("MPI_Ibcast", MPI_Ibcast(buf, n, t, root, comm_, &r), &r);
  }

  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt,
                   void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("allgather", count_per_rank * static_cast<std::size_t>(size_), stream));
    const std::size_t esz = dtype_size(dt);
    const char* my_slot = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * count_per_rank * esz;
    // In place: send == recv (accrun_allgather(3), as on the store) or
    // NCCL's send == this rank's slot; either way the input already sits in
    // that slot.
    const void* sb = send == my_slot || send == recv ? MPI_IN_PLACE : send;
    const int n = static_cast<int>(count_per_rank);
    MPI_Datatype t = to_mpi_type(dt, half_);
    if (sb != MPI_IN_PLACE && overlaps(send, count_per_rank * esz, recv, count_per_rank * esz * size_)) {
      return invalid_argument("allgather on group '" + name_ +
                              "': the send buffer overlaps the receive buffer but is not this rank's slot "
                              "(in place means send == recv, this rank's part already at recv + rank * "
                              "count_per_rank elements)");
    }
    arrive(false);
    if (blocking()) return rc_status("MPI_Allgather", MPI_Allgather(sb, n, t, recv, n, t, comm_));
    MPI_Request r;
    return post("MPI_Iallgather", MPI_Iallgather(sb, n, t, recv, n, t, comm_, &r), &r);
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op,
                       void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("reducescatter", recv_count * static_cast<std::size_t>(size_), stream));
    const std::size_t esz = dtype_size(dt);
    const int n = static_cast<int>(recv_count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    MPI_Op o = to_mpi_op(op, dt, half_);
    arrive(false);
    if (!overlaps(send, recv_count * esz * size_, recv, recv_count * esz)) {
      if (blocking()) {
        return rc_status("MPI_Reduce_scatter_block", MPI_Reduce_scatter_block(send, recv, n, t, o, comm_));
      }
      MPI_Request r;
      return post("MPI_Ireduce_scatter_block", MPI_Ireduce_scatter_block(send, recv, n, t, o, comm_, &r), &r);
    }
    // In place (recv inside send, NCCL's layout): MPI wants disjoint buffers,
    // so the result goes through a temporary and is copied out on completion.
    PendingCopy pc;
    pc.tmp.resize(recv_count * esz);
    pc.dst = recv;
    if (blocking()) {
      ACCRUN_RETURN_IF_ERROR(rc_status("MPI_Reduce_scatter_block",
                                       MPI_Reduce_scatter_block(send, pc.tmp.data(), n, t, o, comm_)));
      std::memcpy(recv, pc.tmp.data(), pc.tmp.size());
      return Status::ok();
    }
    MPI_Request r;
    int rc = MPI_Ireduce_scatter_block(send, pc.tmp.data(), n, t, o, comm_, &r);
    if (rc != MPI_SUCCESS || depth_ > 0) {
      if (rc == MPI_SUCCESS) copies_.push_back(std::move(pc));  // copied out at group_end
      return post("MPI_Ireduce_scatter_block", rc, &r);
    }
    Status st = wait_all("MPI_Ireduce_scatter_block", &r, 1, false);
    if (st.is_ok()) {
      std::memcpy(recv, pc.tmp.data(), pc.tmp.size());
    } else {
      orphaned_.push_back(std::move(pc));  // MPI may still write into it
    }
    return st;
  }

  Status barrier() override {
    ACCRUN_RETURN_IF_ERROR(check("barrier", 0, nullptr));
    arrive(false);
    if (blocking()) return rc_status("MPI_Barrier", MPI_Barrier(comm_));
    MPI_Request r;
    return post("MPI_Ibarrier", MPI_Ibarrier(comm_, &r), &r);
  }

  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("send", count, stream));
    ACCRUN_RETURN_IF_ERROR(check_peer("send", peer));
    const int n = static_cast<int>(count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    if (depth_ > 0) {
      MPI_Request r;
      return post("MPI_Isend", MPI_Isend(buf, n, t, peer, kP2pTag, comm_, &r), &r);
    }
    // Buffered: a copy of the message goes out; the call returns at once
    // unless the bytes in flight to this peer are past the bound.
    const std::size_t bytes = count * dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(drain_sends(peer, bytes, "send"));
    Outgoing o;
    o.data.assign(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
    o.peer = peer;
    const int rc = MPI_Isend(o.data.data(), n, t, peer, kP2pTag, comm_, &o.req);
    if (rc != MPI_SUCCESS) return rc_status("MPI_Isend", rc);
    inflight_[static_cast<std::size_t>(peer)] += bytes;
    outgoing_.push_back(std::move(o));
    return Status::ok();
  }

  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check("recv", count, stream));
    ACCRUN_RETURN_IF_ERROR(check_peer("recv", peer));
    const int n = static_cast<int>(count);
    MPI_Datatype t = to_mpi_type(dt, half_);
    if (blocking()) {
      const int rc = MPI_Recv(buf, n, t, peer, kP2pTag, comm_, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) [[likely]] return Status::ok();
      return truncated(rc) ? too_small("recv", peer, count * dtype_size(dt)) : rc_status("MPI_Recv", rc);
    }
    MPI_Request r;
    int rc = MPI_Irecv(buf, n, t, peer, kP2pTag, comm_, &r);
    if (rc != MPI_SUCCESS) return rc_status("MPI_Irecv", rc);
    if (depth_ > 0) {
      pending_.push_back(r);
      return Status::ok();
    }
    // A lone receive that times out is cancelled, so the group stays usable.
    int err = MPI_SUCCESS;
    Status st = wait_all("MPI_Irecv", &r, 1, /*cancel_on_timeout=*/true, peer, &err);
    return truncated(err) ? too_small("recv", peer, count * dtype_size(dt)) : st;
  }

  // Whether an MPI error says a message was longer than its receive buffer.
  static bool truncated(int rc) {
    int cls = MPI_SUCCESS;
    return rc != MPI_SUCCESS && MPI_Error_class(rc, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE;
  }

  // As the store says it, but MPI has taken the message (cut): it is gone.
  Status too_small(const char* what, int peer, std::size_t bytes) const {
    return invalid_argument("group '" + name_ + "': " + what + ": the message from " + describe(peer) +
                            " is larger than the " + std::to_string(bytes) +
                            " bytes the receive buffer holds; MPI received it cut short, so it is lost: "
                            "receive with a buffer as large as the message sent");
  }

  Status group_start() override {
    if (!broken_.is_ok()) return broken_;
    ++depth_;
    return Status::ok();
  }

  Status group_end() override {
    if (depth_ == 0) {
      return invalid_usage("group_end on group '" + name_ + "' without a matching group_start");
    }
    if (--depth_ > 0) return Status::ok();
    std::vector<MPI_Request> reqs;
    reqs.swap(pending_);
    Status st = reqs.empty() ? Status::ok() : wait_all("group_end", reqs.data(), static_cast<int>(reqs.size()), false);
    if (st.is_ok()) {
      for (PendingCopy& pc : copies_) std::memcpy(pc.dst, pc.tmp.data(), pc.tmp.size());
      copies_.clear();
    } else if (!broken_.is_ok()) {
      // MPI may still write into the temporaries: keep them alive for good.
      orphaned_.insert(orphaned_.end(), std::make_move_iterator(copies_.begin()),
                       std::make_move_iterator(copies_.end()));
      copies_.clear();
    } else {
      copies_.clear();
    }
    return st;
  }

 private:
  static constexpr int kP2pTag = 0;
  // Bytes of buffered sends in flight towards one peer (the store's bound
  // on bytes buffered per pair of ranks is the same; accrun_send(3)).
  static constexpr std::size_t kMaxInflightBytes = 64u << 20;

  static constexpr int kReapOnly = -2;
  static constexpr int kDestroyWaitMs = 60'000;  // at destroy, without a timeout
  static constexpr int kAbsentGraceMs = 2'000;   // absent_members()

  // Reaps completed buffered sends.  With peer == kReapOnly, that is all.
  // With peer >= 0, first waits until
  // `adding` more bytes towards peer fit the bound (or nothing is in flight
  // to it); with peer < 0, until every buffered send has completed.  Waits
  // at most the group's timeout, failing for a failed peer.
  Status drain_sends(int peer, std::size_t adding, const char* call) {
    auto reap = [&]() -> Status {
      for (std::size_t i = 0; i < outgoing_.size();) {
        int done = 0;
        const int rc = MPI_Test(&outgoing_[i].req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          broken_ = rc_status("MPI_Isend", rc);
          return broken_;
        }
        if (done == 0) { ++i; continue; }
        inflight_[static_cast<std::size_t>(outgoing_[i].peer)] -= outgoing_[i].data.size();
        outgoing_[i] = std::move(outgoing_.back());
        outgoing_.pop_back();
      }
      return Status::ok();
    };
    auto room = [&] {
      if (peer < 0) return outgoing_.empty();
      const std::size_t held = inflight_[static_cast<std::size_t>(peer)];
      return held == 0 || held + adding <= kMaxInflightBytes;
    };
    if (outgoing_.empty()) return Status::ok();
    ACCRUN_RETURN_IF_ERROR(reap());
    if (peer == kReapOnly) return Status::ok();
    const int limit_ms = timeout_ms_ >= 0 ? timeout_ms_ : peer < 0 ? kDestroyWaitMs : -1;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (std::uint64_t spins = 0; !room(); ++spins) {
      ACCRUN_RETURN_IF_ERROR(reap());
      if (oversubscribed_) sched_yield();
      if ((spins & 1023) != 1023) continue;
      for (const Outgoing& o : outgoing_) {
        if (peer >= 0 && o.peer != peer) continue;
        if (auto f = failed_peer(o.peer)) {
          if (peer < 0) return remote_error("group '" + name_ + "': " + call + ": " + *f);
          broken_ = remote_error("group '" + name_ + "': " + call + ": " + *f + "; the group is unusable now: destroy it");
          return broken_;
        }
      }
      if (limit_ms >= 0 && Clock::now() - start >= std::chrono::milliseconds(limit_ms)) {
        std::string who;
        for (const Outgoing& o : outgoing_)
          if ((peer < 0 || o.peer == peer) && who.find(describe(o.peer)) == std::string::npos)
            who += (who.empty() ? "" : ", ") + describe(o.peer);
        return timeout_error("group '" + name_ + "': " + call + " timed out after " + std::to_string(limit_ms) +
                             " ms waiting for " + who + " to receive earlier sends (at most " +
                             std::to_string(kMaxInflightBytes >> 20) + " MiB may be in flight to one peer)");
      }
    }
    return Status::ok();
  }

  std::string describe(int g) const {
    const Member& m = members_[static_cast<std::size_t>(g)];
    return "group rank " + std::to_string(g) + " (job rank " + std::to_string(m.job_rank) + " on host " +
           (m.host.empty() ? std::string("?") : m.host) + ")";
  }

  bool blocking() const { return depth_ == 0 && timeout_ms_ < 0; }

  // A collective is posted: this member's next in the group's sequence.
  // (A broadcast or reduce lets some members return before the others
  // arrive.)
  void arrive(bool some_return_first) {
    ++colls_;
    last_may_leave_ = some_return_first || (coll_open_ && last_may_leave_);
    coll_open_ = true;
  }

  // Which members a timed-out collective waited for.  MPI does not say, so
  // each member whose collective times out says so in the group's directory
  // under the collective's number in the group's sequence, and reads the
  // others' word for a grace period (kAbsentGraceMs, or the timeout when
  // shorter): a member that never says so had not arrived, or, in a
  // broadcast or reduce that some members leave first, had gone on.  Calls
  // that complete cost nothing.
  std::string absent_members() {
    const std::string all = "the group's members";
    if (rendezvous_ == nullptr || size_ < 2) return all;
    const std::string key = "mpi.timedout." + std::to_string(colls_) + ".";
    if (!rendezvous_->publish(key + std::to_string(rank_), "1").is_ok()) return all;
    using Clock = std::chrono::steady_clock;
    const int grace = std::min(timeout_ms_, kAbsentGraceMs);
    const auto deadline = Clock::now() + std::chrono::milliseconds(grace);
    std::string absent;
    int n = 0;
    for (int g = 0; g < size_; ++g) {
      if (g == rank_) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      Result<std::string> r = rendezvous_->lookup(key + std::to_string(g), static_cast<int>(std::max<long long>(left, 0)));
      if (r.is_ok()) continue;
      if (r.status().code() != Code::kTimeout && r.status().code() != Code::kNotFound) return all;
      absent += (absent.empty() ? "" : ", ") + describe(g);
      ++n;
    }
    const std::string nth = "group's collective call " + std::to_string(colls_);
    if (n == 0)
      return all + ": every member was waiting in the " + nth +
             ", so they called different collectives or passed different counts or roots";
    return absent + (n == 1 ? ", which" : ", which members") + " had not arrived at the " + nth +
           " when this member timed out, nor within " + std::to_string(grace) + " ms after" +
           (last_may_leave_ ? " (in a broadcast or reduce, members may also have returned first)" : "");
  }

  static bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
    auto pa = reinterpret_cast<std::uintptr_t>(a);
    auto pb = reinterpret_cast<std::uintptr_t>(b);
    return an > 0 && bn > 0 && pa < pb + bn && pb < pa + an;
  }

  Status check(const char* what, std::size_t count, void* stream) {
    if (!broken_.is_ok()) [[unlikely]] return broken_;
    if (!outgoing_.empty()) ACCRUN_RETURN_IF_ERROR(drain_sends(kReapOnly, 0, what));
    if (stream != nullptr) [[unlikely]] {
      return invalid_argument(std::string(what) + " on group '" + name_ +
                              "': a stream was given, but this is an MPI group (host buffers only; streams "
                              "and device buffers need an NCCL group)");
    }
    if (count > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
      return invalid_argument(std::string(what) + " on group '" + name_ + "': count " + std::to_string(count) +
                              " is more than an MPI count holds (" + std::to_string(INT_MAX) +
                              "); split the operation");
    }
    return Status::ok();
  }

  Status check_rank(const char* what, const char* role, int r) const {
    if (r < 0 || r >= size_) [[unlikely]] {
      return invalid_argument(std::string(what) + " on group '" + name_ + "': " + role + " " +
                              std::to_string(r) + " is out of range (group size " + std::to_string(size_) + ")");
    }
    return Status::ok();
  }

  Status check_peer(const char* what, int peer) const {
    ACCRUN_RETURN_IF_ERROR(check_rank(what, "peer", peer));
    if (peer == rank_ && depth_ == 0) [[unlikely]] {
      return invalid_usage(std::string(what) + " on group '" + name_ +
                           "': peer is this rank; a send to oneself must be paired with its receive inside "
                           "group_start/group_end");
    }
    return Status::ok();
  }

  Status rc_status(const char* call, int rc) const {
    if (rc == MPI_SUCCESS) [[likely]] return Status::ok();
    return {Code::kSystem, "group '" + name_ + "': " + call + ": " + mpi_error_text(rc)};
  }

  // A request was posted: inside a bracket it waits for group_end, else now.
  // (A pointer, read after the posting call in the argument list has run.)
  Status post(const char* call, int rc, MPI_Request* r) {
    if (rc != MPI_SUCCESS) return rc_status(call, rc);
    if (depth_ > 0) {
      pending_.push_back(*r);
      return Status::ok();
    }
    return wait_all(call, r, 1, false);
  }

  // A failed member among those a call waits on: `only` alone (>= 0), or
  // every member.
  std::optional<std::string> failed_peer(int only = -1) const {
    if (peers_ == nullptr) return std::nullopt;
    for (int g = 0; g < size_; ++g) {
      if (g == rank_ || (only >= 0 && g != only)) continue;
      if (auto f = peers_->failure(members_[static_cast<std::size_t>(g)].job_rank)) {
        return "peer " + std::to_string(g) + " (job rank " + std::to_string(members_[static_cast<std::size_t>(g)].job_rank) +
               " on host " + members_[static_cast<std::size_t>(g)].host + ") failed: " + *f;
      }
    }
    return std::nullopt;
  }

  // Completes the requests, watching the timeout and the job's failure
  // notices.  MPI progresses only inside MPI calls, so this tests in a loop:
  // spinning for the latency MPI users expect, yielding when ranks outnumber
  // cores.  On a timeout or failure the requests stay with MPI (collectives
  // cannot be cancelled) and the group is marked unusable; a lone receive is
  // cancelled instead, which leaves the group usable.
  Status wait_all(const char* call, MPI_Request* reqs, int n, bool cancel_on_timeout, int peer = -1,
                  int* error = nullptr) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    std::uint64_t spins = 0;
    for (;;) {
      int done = 0;
      // One request's error is the call's own; several report theirs in
      // their statuses (MPI_ERR_IN_STATUS), which are kept to name it.
      int rc = n == 1 ? MPI_Test(reqs, &done, MPI_STATUS_IGNORE) : MPI_Testall(n, reqs, &done, statuses(n));
      if (rc != MPI_SUCCESS) {
        if (rc == MPI_ERR_IN_STATUS) {
          for (int i = 0; i < n; ++i) {
            const int e = statuses_[static_cast<std::size_t>(i)].MPI_ERROR;
            if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) {
              rc = e;
              break;
            }
          }
        }
        if (error != nullptr) *error = rc;
        // A lone receive cut short has completed: nothing else is affected.
        if (n == 1 && truncated(rc)) return rc_status(call, rc);
        broken_ = rc_status(call, rc);
        return broken_;
      }
      if (done != 0) {
        if (peer < 0) coll_open_ = false;
        return Status::ok();
      }
      if (oversubscribed_) sched_yield();
      if ((++spins & 1023) != 0) continue;  // look at the clock and peers now and then only
      if (auto f = failed_peer(peer)) {
        broken_ = remote_error("group '" + name_ + "': " + call + ": " + *f +
                               "; the group is unusable now: destroy it");
        return broken_;
      }
      if (timeout_ms_ >= 0 &&
          Clock::now() - start >= std::chrono::milliseconds(timeout_ms_)) {
        std::string msg = "group '" + name_ + "': " + call + " did not complete within " +
                          std::to_string(timeout_ms_) + " ms (waiting for " +
                          (peer >= 0 ? describe(peer) : coll_open_ ? absent_members() : std::string("the group's members")) +
                          ")";
        if (cancel_on_timeout && n == 1 && cancel(reqs[0])) return timeout_error(msg);
        broken_ = timeout_error(msg + "; the group's MPI communicator is unusable now: destroy the group");
        return broken_;
      }
    }
  }

  MPI_Status* statuses(int n) {
    if (statuses_.size() < static_cast<std::size_t>(n)) statuses_.resize(static_cast<std::size_t>(n));
    return statuses_.data();
  }

  static bool cancel(MPI_Request& r) {
    if (MPI_Cancel(&r) != MPI_SUCCESS) return false;
    MPI_Status s;
    if (MPI_Wait(&r, &s) != MPI_SUCCESS) return false;
    int cancelled = 0;
    MPI_Test_cancelled(&s, &cancelled);
    return cancelled != 0;
  }

  std::string name_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  std::vector<Member> members_;
  bool oversubscribed_;
  int timeout_ms_;
  std::vector<MPI_Status> statuses_;      // wait_all's, for several requests
  const PeerMonitor* peers_;
  Rendezvous* rendezvous_;              // not owned; outlives the backend
  MPI_Comm comm_;
  const HalfTypes& half_;
  int depth_ = 0;                       // group_start nesting
  std::uint64_t colls_ = 0;             // collectives posted (each member's count agrees)
  bool coll_open_ = false;              // a posted collective has not completed
  bool last_may_leave_ = false;         // the latest collective is a broadcast or reduce
  std::vector<Outgoing> outgoing_;      // buffered sends in flight
  std::vector<std::size_t> inflight_ = std::vector<std::size_t>(static_cast<std::size_t>(size_), 0);  // bytes per peer
  std::vector<MPI_Request> pending_;    // posted inside the bracket
  std::vector<PendingCopy> copies_;     // results to copy out at group_end
  std::vector<PendingCopy> orphaned_;   // temporaries MPI may still write (after a failure)
  Status broken_;                       // set once the communicator is unusable
};

// Every member publishes its arrival in the group's directory and waits for
// the others.  Groups sharing ranks but created in different orders meet
// different names here, so the mismatch ends in an error naming who never
// came instead of a hang inside MPI_Comm_create_group.
Status meet(const GroupContext& ctx) {
  if (ctx.rendezvous == nullptr || ctx.size == 1) return Status::ok();
  const std::string prefix = "mpi.arrive.";
  ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish(prefix + std::to_string(ctx.rank), "1"));
  constexpr int kSliceMs = 30000;
  for (int g = 0; g < ctx.size; ++g) {
    if (g == ctx.rank) continue;
    const std::string key = prefix + std::to_string(g);
    int waited = 0;
    for (;;) {
      int slice = ctx.timeout_ms < 0 ? kSliceMs : std::min(kSliceMs, ctx.timeout_ms - waited);
      Result<std::string> r = ctx.rendezvous->lookup(key, std::max(slice, 0));
      if (r.is_ok()) break;
      if (r.status().code() != Code::kTimeout) return r.status();
      waited += std::max(slice, 0);
      if (ctx.peers != nullptr) {
        if (auto f = ctx.peers->failure(ctx.members[static_cast<std::size_t>(g)].job_rank)) {
          return remote_error("creating MPI group '" + ctx.name + "': " + describe_member(ctx, g) +
                              " failed: " + *f);
        }
      }
      const std::string why = describe_member(ctx, g) + " has not arrived at MPI group '" + ctx.name +
                              "' (epoch " + std::to_string(ctx.epoch) +
                              "); MPI groups that share ranks must be created in the same order on those ranks";
      if (ctx.timeout_ms >= 0 && waited >= ctx.timeout_ms) {
        return timeout_error(why + " (waited " + std::to_string(ctx.timeout_ms) + " ms)");
      }
      log(LogLevel::kWarn, "%s (still waiting after %d s)", why.c_str(), waited / 1000);
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> make_mpi_backend(const GroupContext& ctx) {
  const std::string where = "MPI group '" + ctx.name + "'";
  if (!mpi_initialized()) {
    return invalid_usage(where + ": MPI is not initialised in this process; call MPI_Init_thread "
                         "(MPI_THREAD_MULTIPLE when groups are used from several threads) or accrun_init_mpi() "
                         "before creating an MPI group");
  }
  if (ctx.size < 1 || ctx.members.size() != static_cast<std::size_t>(ctx.size) || ctx.rank < 0 ||
      ctx.rank >= ctx.size) {
    return invalid_argument(where + ": inconsistent group context (rank " + std::to_string(ctx.rank) + ", size " +
                            std::to_string(ctx.size) + ", " + std::to_string(ctx.members.size()) + " members)");
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // The group names members by job rank; MPI_COMM_WORLD must number them alike,
  // which holds when Open MPI starts under accrun (PMIx ranks are job ranks).
  if (world_rank != ctx.members[static_cast<std::size_t>(ctx.rank)].job_rank) {
    return invalid_usage(where + ": this process is job rank " +
                         std::to_string(ctx.members[static_cast<std::size_t>(ctx.rank)].job_rank) +
                         " but MPI_COMM_WORLD rank " + std::to_string(world_rank) +
                         "; the MPI backend needs MPI started by accrun for the same job");
  }
  std::vector<int> ranks;
  ranks.reserve(ctx.members.size());
  for (std::size_t g = 0; g < ctx.members.size(); ++g) {
    const int jr = ctx.members[g].job_rank;
    if (jr < 0 || jr >= world_size) {
      return invalid_usage(where + ": " + describe_member(ctx, static_cast<int>(g)) +
                           " is outside MPI_COMM_WORLD (size " + std::to_string(world_size) + ")");
    }
    ranks.push_back(jr);
  }

  ThreadGuard& guard = ThreadGuard::instance();
  ACCRUN_RETURN_IF_ERROR(guard.enter(level).with_context(where));
  struct Leave {
    ThreadGuard& g;
    bool armed = true;
    ~Leave() { if (armed) g.leave(); }
  } leave{guard};

  ACCRUN_RETURN_IF_ERROR(meet(ctx));

  // The tag keeps concurrent creations (from several threads) apart.
  int* tag_ub_attr = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub_attr, &flag);
  const std::uint64_t tag_ub = (flag != 0 && tag_ub_attr != nullptr) ? static_cast<std::uint64_t>(*tag_ub_attr) : 32767;
  const std::uint64_t ident = fnv1a(ctx.name) ^ (ctx.epoch * 0x9E3779B97F4A7C15ULL);
  const int tag = static_cast<int>(ident % (tag_ub + 1));

  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  int rc = MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) return Status(Code::kSystem, where + ": MPI_Group_incl: " + mpi_error_text(rc));
  MPI_Comm comm = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm);
  MPI_Group_free(&group);
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL) {
    return Status(Code::kSystem, where + ": MPI_Comm_create_group: " + mpi_error_text(rc));
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const std::string comm_name = "accrun:" + ctx.name + "#" + std::to_string(ctx.epoch);
  MPI_Comm_set_name(comm, comm_name.substr(0, MPI_MAX_OBJECT_NAME - 1).c_str());

  // Every member must have built this same group: compare (name, epoch)
  // through one allreduce of (id, ~id) with MAX — equal everywhere iff every
  // member's id is the same.
  std::uint64_t mine[2] = {ident, ~ident};
  std::uint64_t got[2] = {0, 0};
  rc = MPI_Allreduce(mine, got, 2, MPI_UINT64_T, MPI_MAX, comm);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return Status(Code::kSystem, where + ": checking the members' group: " + mpi_error_text(rc));
  }
  if (got[0] != mine[0] || got[1] != mine[1]) {
    MPI_Comm_free(&comm);
    return invalid_usage(where + " (epoch " + std::to_string(ctx.epoch) +
                         "): the members created different groups at the same time; MPI groups that share "
                         "ranks must be created in the same order on those ranks");
  }
  leave.armed = false;  // the backend leaves the guard when destroyed
  log(LogLevel::kDebug, "%s: MPI communicator of %d ranks (tag %d, thread level %s)", where.c_str(), ctx.size,
      tag, thread_level_name(level));
  return std::unique_ptr<Backend>(new MpiBackend(ctx, comm));
}

}  // namespace accrun::collectives
