// The NCCL backend (ACCRUN_BACKEND_NCCL).  docs/design.md §5, accrun(7)
// BACKENDS.
//
// A group is one non-blocking NCCL communicator (ncclCommInitRankConfig,
// blocking = 0) on the device that was current when the group was made.
// Group rank 0 makes the unique id and publishes it in the group's
// directory (scoped to the group's epoch, so no stale id can be read); the
// others wait for it with the group's timeout.
//
// Completion is tracked by events recorded after the calls, as
// torch.distributed's WorkNCCL does, and a watchdog thread looks at the
// oldest unfinished one.  Calls queued on one stream within kCoalesce of
// the first share one tracked entry, whose event is recorded again after
// each: work on a stream finishes in order, so it finishes when the last
// of them does.  A loop of short calls then costs one event record per
// call, and the watchdog's look (made holding mu_, so the calls wait for
// it) a few event queries rather than one per call queued since the last
// look: thousands in 20 ms of 5 µs calls, each query up to ~1.5 µs on an
// H100 (where this took away calls of 3.5-3.9 µs over NCCL's own, and left
// the median as it was).  The watchdog
// also polls ncclCommGetAsyncError, the job's failure notices and the
// group's abort notice.  On an NCCL error, a failed peer, an operation
// older than the group's timeout, or another member's abort, it aborts the
// communicator, and every later call on the group returns the reason.  The
// member that failed first publishes why under the group's epoch, so every
// other member aborts too and says which member started it.
//
// Locking: mu_ guards the communicator and the group's state, and every
// NCCL call on the communicator is made under it, each one short (the
// communicator is non-blocking).  Nothing waits while holding it: a call
// still being queued (ncclInProgress) and a barrier drop it between looks,
// so the watchdog runs whatever the caller does.
//
// Between group_start and group_end the operations belong to NCCL's open
// group, so the communicator cannot be aborted under them: a failure seen
// then is held and reported by group_end, after ncclGroupEnd.
//
// Operations run on the caller's stream, or on the group's own non-blocking
// stream when the caller gives none, with the group's device current
// whatever device the calling thread has current.  Buffers must be device
// (or managed) memory: a host pointer is refused, never handed to NCCL.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"
#include "accrun/config.h"
#include "accrun/log.hpp"
#include "nccl_lib.hpp"

namespace accrun::collectives {

#if ACCRUN_HAVE_NCCL
namespace {

using Clock = std::chrono::steady_clock;
using nccl::DeviceGuard;
using nccl::Lib;
using nccl::to_nccl;

// Where the first member to abort says why, under the group's epoch.
constexpr const char* kAbortKey = "nccl.abort";
// How often the watchdog looks at the group's state, and at the abort key.
constexpr auto kWatchPeriod = std::chrono::milliseconds(20);
constexpr auto kAbortLookPeriod = std::chrono::milliseconds(100);
// Calls on one stream within this time of the first share one tracked
// entry (see the top of this file).
constexpr auto kCoalesce = std::chrono::milliseconds(1);

std::string describe_member(const std::vector<Member>& members, int g) {
  const Member& m = members[static_cast<std::size_t>(g)];
  return "group rank " + std::to_string(g) + " (job rank " + std::to_string(m.job_rank) + " on host " +
         (m.host.empty() ? std::string("?") : m.host) + ")";
}

std::optional<std::string> failed_peer(const PeerMonitor* peers, const std::vector<Member>& members, int self) {
  if (peers == nullptr) return std::nullopt;
  for (std::size_t g = 0; g < members.size(); ++g) {
    if (static_cast<int>(g) == self) continue;
    if (auto f = peers->failure(members[g].job_rank)) {
      return describe_member(members, static_cast<int>(g)) + " failed: " + *f;
    }
  }
  return std::nullopt;
}

std::string ms_text(Clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(d).count());
  return b;
}

struct Buffer {
  const void* ptr;
  std::size_t count;
  const char* what;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(const Lib& lib, const GroupContext& ctx, ncclComm_t comm, int device, cudaStream_t stream,
              void* barrier_buf)
      : lib_(lib),
        name_(ctx.name),
        rank_(ctx.rank),
        size_(ctx.size),
        members_(ctx.members),
        peers_(ctx.peers),
        rendezvous_(ctx.rendezvous),
        device_(device),
        comm_(comm),
        stream_(stream),
        barrier_buf_(barrier_buf),
        timeout_ms_(ctx.timeout_ms) {
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    publish_abort();  // a failure the watchdog had no time to tell the others of
    DeviceGuard on_device(lib_, device_);
    std::unique_lock<std::mutex> lock(mu_);
    if (comm_ != nullptr) {
      // Flush and free; a communicator that does not finish in time (a
      // peer gone), or one left inside an open bracket, is aborted so the
      // destructor cannot hang.
      ncclResult_t r = depth_ > 0 ? ncclInvalidUsage : lib_.ncclCommFinalize(comm_);
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (r == ncclInProgress && Clock::now() < until) {
        if (lib_.ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclSystemError;
        if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (r == ncclSuccess) {
        lib_.ncclCommDestroy(comm_);
      } else {
        lib_.ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    for (const Work& w : works_) lib_.cudaEventDestroy(w.event);
    for (cudaEvent_t e : spare_events_) lib_.cudaEventDestroy(e);
    lib_.cudaStreamDestroy(stream_);
    lib_.cudaFree(barrier_buf_);
  }

  BackendKind kind() const override { return BackendKind::kNccl; }
  void set_timeout(int timeout_ms) override { timeout_ms_.store(timeout_ms); }

  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) override {
    return run("ncclAllReduce", {{send, count, "send buffer"}, {recv, count, "receive buffer"}}, stream,
               [&](cudaStream_t s) {
                 return lib_.ncclAllReduce(send, recv, count, to_nccl(dt), to_nccl(op), comm_, s);
               });
  }
  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_rank("reduce", "root", root));
    return run("ncclReduce", {{send, count, "send buffer"}, {rank_ == root ? recv : nullptr, count, "receive buffer"}},
               stream, [&](cudaStream_t s) {
                 return lib_.ncclReduce(send, recv, count, to_nccl(dt), to_nccl(op), root, comm_, s);
               });
  }
  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_rank("broadcast", "root", root));
    return run("ncclBroadcast", {{buf, count, "buffer"}}, stream, [&](cudaStream_t s) {
      return lib_.ncclBroadcast(buf, buf, count, to_nccl(dt), root, comm_, s);
    });
  }
  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) override {
    // In place, as on every backend (accrun_allgather(3)): send == recv means
    // this rank's part already sits in its slot, which is NCCL's in-place
    // form.
    const void* in = send == recv && recv != nullptr
                         ? static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * count_per_rank * dtype_size(dt)
                         : send;
    return run("ncclAllGather",
               {{in, count_per_rank, "send buffer"}, {recv, count_per_rank * size_, "receive buffer"}}, stream,
               [&](cudaStream_t s) {
                 return lib_.ncclAllGather(in, recv, count_per_rank, to_nccl(dt), comm_, s);
               });
  }
  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op, void* stream) override {
    return run("ncclReduceScatter",
               {{send, recv_count * size_, "send buffer"}, {recv, recv_count, "receive buffer"}}, stream,
               [&](cudaStream_t s) {
                 return lib_.ncclReduceScatter(send, recv, recv_count, to_nccl(dt), to_nccl(op), comm_, s);
               });
  }
  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_rank("send", "peer", peer));
    return run("ncclSend", {{buf, count, "buffer"}}, stream, [&](cudaStream_t s) {
      return lib_.ncclSend(buf, count, to_nccl(dt), peer, comm_, s);
    });
  }
  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_rank("recv", "peer", peer));
    return run("ncclRecv", {{buf, count, "buffer"}}, stream, [&](cudaStream_t s) {
      return lib_.ncclRecv(buf, count, to_nccl(dt), peer, comm_, s);
    });
  }

  // NCCL has no barrier: an allreduce of one int on the group's stream,
  // waited for, is one.  Unlike the other calls it blocks until every
  // member has arrived, the group fails or its timeout passes.
  Status barrier() override {
    DeviceGuard on_device(lib_, device_);
    std::unique_lock<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(current_locked());
    const ncclResult_t r = lib_.ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream_);
    ACCRUN_RETURN_IF_ERROR(finish_locked(lock, "ncclAllReduce (barrier)", r, stream_));
    if (depth_ > 0) return Status::ok();  // completes with the bracket
    const std::uint64_t mine = next_seq_;
    // Yields for the first millisecond (a barrier is usually short), then
    // sleeps 50 µs between looks; the watchdog ends it on a failure.
    const auto spin_until = Clock::now() + std::chrono::milliseconds(1);
    for (;;) {
      ACCRUN_RETURN_IF_ERROR(current_locked());
      poll_works_locked();
      if (finished_locked(mine)) return Status::ok();
      lock.unlock();
      if (Clock::now() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      lock.lock();
    }
  }

  Status group_start() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(current_locked());
    const ncclResult_t r = lib_.ncclGroupStart();
    if (r != ncclSuccess) return nccl_error("ncclGroupStart", r);
    ++depth_;
    return Status::ok();
  }

  Status group_end() override {
    DeviceGuard on_device(lib_, device_);
    std::unique_lock<std::mutex> lock(mu_);
    if (depth_ == 0) return invalid_usage("group_end on group '" + name_ + "' without a matching group_start");
    // The communicator is alive here: aborts wait for the bracket to close.
    const ncclResult_t r = lib_.ncclGroupEnd();
    if (--depth_ > 0) return r == ncclSuccess || r == ncclInProgress ? Status::ok() : nccl_error("ncclGroupEnd", r);
    if (!held_.is_ok()) {
      Status st = std::move(held_);
      held_ = Status::ok();
      fail_locked(Status(st.code(), st.message() + " (seen inside a group_start/group_end bracket, reported at its end)"),
                  held_publish_);
      return error_;
    }
    std::vector<cudaStream_t> streams;
    streams.swap(bracket_streams_);
    Status st = finish_locked(lock, "ncclGroupEnd", r, nullptr);
    if (!st.is_ok() || depth_ > 0) return st;
    for (cudaStream_t s : streams) ACCRUN_RETURN_IF_ERROR(track_locked("ncclGroupEnd", s));
    return Status::ok();
  }

 private:
  // Calls first_seq..last_seq, queued on `stream` from queued_at on; the
  // event is recorded after the last of them.
  struct Work {
    std::uint64_t first_seq;
    std::uint64_t last_seq;
    const char* call;  // the first call's name
    cudaEvent_t event;
    Clock::time_point queued_at;
    cudaStream_t stream;
  };

  template <class Issue>
  Status run(const char* call, std::initializer_list<Buffer> buffers, void* stream, Issue issue) {
    ACCRUN_RETURN_IF_ERROR(check_buffers(call, buffers));
    DeviceGuard on_device(lib_, device_);
    cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : stream_;
    std::unique_lock<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(current_locked());
    const ncclResult_t r = issue(s);
    return finish_locked(lock, call, r, s);
  }

  // The group's failure, or inside a bracket the failure held for its end.
  Status current_locked() const {
    if (!error_.is_ok()) return error_;
    if (depth_ > 0 && !held_.is_ok()) return held_;
    return Status::ok();
  }

  Status check_rank(const char* what, const char* role, int r) const {
    if (r < 0 || r >= size_) {
      return invalid_argument(std::string(what) + " on group '" + name_ + "': " + role + " " + std::to_string(r) +
                              " is out of range (group size " + std::to_string(size_) + ")");
    }
    return Status::ok();
  }

  Status check_buffers(const char* call, std::initializer_list<Buffer> buffers) const {
    for (const Buffer& b : buffers) {
      if (b.ptr == nullptr || b.count == 0) continue;
      if (memory_kind(b.ptr) == MemoryKind::kHost) {
        char where[32];
        std::snprintf(where, sizeof where, "%p", b.ptr);
        return invalid_argument("group '" + name_ + "': " + call + ": the " + b.what + " (" + where +
                                ") is host memory, and NCCL takes GPU memory only: pass a device buffer, or use "
                                "a store or MPI group, or ACCRUN_BACKEND_AUTO, which sends host buffers to them");
      }
    }
    return Status::ok();
  }

  Status nccl_error(const char* call, ncclResult_t r) const {
    const char* last = comm_ != nullptr ? lib_.ncclGetLastError(comm_) : nullptr;
    std::string text = std::string(lib_.ncclGetErrorString(r)) + (last && *last ? std::string(": ") + last : "");
    const Code code = r == ncclInvalidArgument ? Code::kInvalidArgument
                      : r == ncclInvalidUsage  ? Code::kInvalidUsage
                      : r == ncclRemoteError   ? Code::kRemote
                                               : Code::kSystem;
    return {code, "group '" + name_ + "': " + call + ": " + text};
  }

  // After a call that may have queued work: wait while NCCL is still
  // queueing it (dropping the lock between looks), turn failures into the
  // group's failure, and track the work for the watchdog.
  Status finish_locked(std::unique_lock<std::mutex>& lock, const char* call, ncclResult_t r, cudaStream_t s) {
    const auto start = Clock::now();
    const auto spin_until = start + std::chrono::milliseconds(1);
    while (r == ncclInProgress) {
      ACCRUN_RETURN_IF_ERROR(current_locked());  // aborted by the watchdog meanwhile
      if (lib_.ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclSystemError;
      if (r != ncclInProgress) break;
      const int t = timeout_ms_.load();
      if (t >= 0 && Clock::now() - start >= std::chrono::milliseconds(t)) {
        fail_locked(timeout_error("group '" + name_ + "': " + call + " was still being queued after " +
                                  std::to_string(t) + " ms; the NCCL communicator was aborted"),
                    true);
        return current_locked();
      }
      lock.unlock();
      if (Clock::now() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      lock.lock();
    }
    if (r != ncclSuccess) {
      Status st = nccl_error(call, r);
      if (r != ncclInvalidArgument && r != ncclInvalidUsage) fail_locked(st, true);
      return st;
    }
    if (s == nullptr) return Status::ok();
    if (depth_ > 0) {
      bool known = false;
      for (cudaStream_t b : bracket_streams_) known |= b == s;
      if (!known) bracket_streams_.push_back(s);
      return Status::ok();
    }
    return track_locked(call, s);
  }

  // Records an event after the work just queued on s: again on the newest
  // entry's event where that entry is on s and younger than kCoalesce,
  // else on a new entry.  The caller has the group's device current.
  Status track_locked(const char* call, cudaStream_t s) {
    const auto now = Clock::now();
    if (!works_.empty() && works_.back().stream == s && now - works_.back().queued_at < kCoalesce) {
      Work& w = works_.back();
      if (cudaError_t ce = lib_.cudaEventRecord(w.event, s); ce != cudaSuccess) return record_error(call, ce);
      w.last_seq = ++next_seq_;
      return Status::ok();
    }
    cudaEvent_t e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else if (cudaError_t ce = lib_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming); ce != cudaSuccess) {
      return Status(Code::kSystem, "group '" + name_ + "': cudaEventCreateWithFlags: " + lib_.cudaGetErrorString(ce));
    }
    if (cudaError_t ce = lib_.cudaEventRecord(e, s); ce != cudaSuccess) {
      spare_events_.push_back(e);
      return record_error(call, ce);
    }
    ++next_seq_;
    works_.push_back(Work{next_seq_, next_seq_, call, e, now, s});
    return Status::ok();
  }

  Status record_error(const char* call, cudaError_t ce) const {
    return Status(Code::kSystem, "group '" + name_ + "': " + call + " was queued, but cudaEventRecord on its stream "
                                 "failed (" + lib_.cudaGetErrorString(ce) + "): is the stream on GPU " +
                                 std::to_string(device_) + ", the group's device?");
  }

  // Retires finished work from the front.  Work on different streams may
  // finish out of order; what the timeout watches is the oldest unfinished.
  void poll_works_locked() {
    while (!works_.empty() && lib_.cudaEventQuery(works_.front().event) == cudaSuccess) {
      spare_events_.push_back(works_.front().event);
      works_.pop_front();
    }
  }

  bool finished_locked(std::uint64_t seq) const {
    for (const Work& w : works_) {
      if (w.first_seq <= seq && seq <= w.last_seq) return lib_.cudaEventQuery(w.event) == cudaSuccess;
    }
    return true;  // retired
  }

  // Records the group's failure and aborts the communicator, unless a
  // bracket is open: then the failure is held for group_end.  `publish`:
  // the failure began here, so the other members are told.
  void fail_locked(Status st, bool publish) {
    if (!error_.is_ok()) return;
    if (depth_ > 0) {
      if (held_.is_ok()) {
        held_ = std::move(st);
        held_publish_ = publish;
        log(LogLevel::kWarn, "%s (held until group_end)", held_.message().c_str());
      }
      return;
    }
    error_ = std::move(st);
    log(LogLevel::kWarn, "%s", error_.message().c_str());
    if (comm_ != nullptr) {
      lib_.ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    publish_due_ = publish && size_ > 1 && rendezvous_ != nullptr;
    cv_.notify_all();
  }

  // Tells the other members why this one aborted (first publisher wins).
  void publish_abort() {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!publish_due_) return;
      publish_due_ = false;
      why = describe_member(members_, rank_) + ": " + error_.message();
    }
    (void)rendezvous_->publish(kAbortKey, why);
  }

  void watch() {
    lib_.cudaSetDevice(device_);  // events and NCCL calls from this thread use the group's device
    auto next_look = Clock::now() + kAbortLookPeriod;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, kWatchPeriod);
      if (stop_) break;
      if (publish_due_) {
        lock.unlock();
        publish_abort();
        lock.lock();
        continue;
      }
      if (!current_locked().is_ok() || comm_ == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      if (lib_.ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        Status st = nccl_error("asynchronous error", async);
        fail_locked(Status(st.code() == Code::kSystem ? Code::kRemote : st.code(),
                           st.message() + "; the NCCL communicator was aborted"),
                    true);
        continue;
      }
      if (auto f = failed_peer(peers_, members_, rank_)) {
        // Every member hears of the death itself: nothing to publish.
        fail_locked(remote_error("group '" + name_ + "': " + *f + "; the NCCL communicator was aborted"), false);
        continue;
      }
      poll_works_locked();
      const int t = timeout_ms_.load();
      if (!works_.empty() && t >= 0) {
        const auto age = Clock::now() - works_.front().queued_at;
        if (age >= std::chrono::milliseconds(t)) {
          const Work& w = works_.front();
          const std::uint64_t later = w.last_seq - w.first_seq;
          fail_locked(timeout_error("group '" + name_ + "': " + w.call + ", queued " + ms_text(age) + " ago" +
                                    (later > 0 ? " (or one of the " + std::to_string(later) +
                                                     " calls queued on its stream within " +
                                                     std::to_string(kCoalesce.count()) + " ms after it)"
                                               : std::string()) +
                                    ", did not complete within the group's timeout of " + std::to_string(t) +
                                    " ms; the NCCL communicator was aborted"),
                      true);
          continue;
        }
      }
      if (size_ > 1 && rendezvous_ != nullptr && Clock::now() >= next_look) {
        next_look = Clock::now() + kAbortLookPeriod;
        lock.unlock();
        Result<std::string> other = rendezvous_->lookup(kAbortKey, 0);
        lock.lock();
        if (other.is_ok() && !stop_) {
          fail_locked(remote_error("group '" + name_ + "': " + *other + " — so this member aborted its NCCL "
                                   "communicator too"),
                      false);
        }
      }
    }
  }

  const Lib& lib_;
  const std::string name_;
  const int rank_;
  const int size_;
  const std::vector<Member> members_;
  const PeerMonitor* peers_;
  Rendezvous* rendezvous_;
  const int device_;

  std::mutex mu_;  // guards everything below; every NCCL call on comm_ is made under it
  std::condition_variable cv_;
  ncclComm_t comm_;            // null once aborted
  cudaStream_t stream_;        // the group's own non-blocking stream
  void* barrier_buf_;          // one device int for the barrier
  std::atomic<int> timeout_ms_;
  Status error_;               // once set, every call returns it
  Status held_;                // a failure seen inside a bracket, for group_end
  bool held_publish_ = false;
  bool publish_due_ = false;   // error_ began here and is not yet published
  int depth_ = 0;              // open group_start brackets
  std::vector<cudaStream_t> bracket_streams_;
  std::deque<Work> works_;     // queued, not yet seen finished, oldest first
  std::vector<cudaEvent_t> spare_events_;
  std::uint64_t next_seq_ = 0;
  bool stop_ = false;
  std::thread watchdog_;
};

// Ranks of one host must hold different GPUs: NCCL refuses two ranks on one
// device, and finds out late.  Each member publishes its device's PCI bus id
// and compares with the other members on its host.
Status check_distinct_gpus(const GroupContext& ctx, const std::string& bus_id) {
  ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish("nccl.gpu." + std::to_string(ctx.rank), bus_id));
  const std::string& my_host = ctx.members[static_cast<std::size_t>(ctx.rank)].host;
  for (int g = 0; g < ctx.size; ++g) {
    if (g == ctx.rank || ctx.members[static_cast<std::size_t>(g)].host != my_host) continue;
    Result<std::string> other = ctx.rendezvous->lookup("nccl.gpu." + std::to_string(g), ctx.timeout_ms);
    if (!other.is_ok()) {
      return other.status().with_context("NCCL group '" + ctx.name + "': waiting for " +
                                         describe_member(ctx.members, g) + " to name its GPU");
    }
    if (*other == bus_id) {
      return invalid_usage("NCCL group '" + ctx.name + "': " + describe_member(ctx.members, ctx.rank) + " and " +
                           describe_member(ctx.members, g) + " use the same GPU (" + bus_id +
                           "); NCCL needs one whole GPU per rank, so ranks sharing a GPU (fractional "
                           "--gpus-per-rank) cannot form an NCCL group: use the store or MPI backend");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> make_nccl_backend(const GroupContext& ctx) {
  const std::string where = "NCCL group '" + ctx.name + "'";
  std::string why;
  const Lib* l = nccl::lib(&why);
  if (l == nullptr) return not_supported(where + ": NCCL is unavailable: " + why);
  const Lib& lib = *l;
  if (ctx.size < 1 || ctx.members.size() != static_cast<std::size_t>(ctx.size) || ctx.rank < 0 ||
      ctx.rank >= ctx.size) {
    return invalid_argument(where + ": inconsistent group context");
  }
  if (ctx.size > 1 && ctx.rendezvous == nullptr) return invalid_argument(where + ": no rendezvous for the unique id");

  int device = 0;
  cudaError_t ce = lib.cudaGetDevice(&device);
  if (ce != cudaSuccess) return Status(Code::kSystem, where + ": cudaGetDevice: " + lib.cudaGetErrorString(ce));
  char bus[64] = {};
  ce = lib.cudaDeviceGetPCIBusId(bus, sizeof bus, device);
  if (ce != cudaSuccess) return Status(Code::kSystem, where + ": cudaDeviceGetPCIBusId: " + lib.cudaGetErrorString(ce));
  if (ctx.size > 1) ACCRUN_RETURN_IF_ERROR(check_distinct_gpus(ctx, bus));

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (ctx.rank == 0) {
    ncclResult_t r = lib.ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Status(Code::kSystem, where + ": ncclGetUniqueId: " + lib.ncclGetErrorString(r));
    if (ctx.size > 1) ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish("nccl.id", nccl::to_hex(&id, sizeof id)));
  } else {
    Result<std::string> got = ctx.rendezvous->lookup("nccl.id", ctx.timeout_ms);
    if (!got.is_ok()) {
      return got.status().with_context(where + ": " + describe_member(ctx.members, 0) +
                                       " did not publish the NCCL unique id (is it creating the group?)");
    }
    if (!nccl::from_hex(*got, &id, sizeof id)) {
      return Status(Code::kSystem, where + ": malformed NCCL unique id in the directory");
    }
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = lib.ncclCommInitRankConfig(&comm, ctx.size, id, ctx.rank, &config);
  const auto start = Clock::now();
  while (r == ncclInProgress && comm != nullptr) {
    if (auto f = failed_peer(ctx.peers, ctx.members, ctx.rank)) {
      lib.ncclCommAbort(comm);
      return remote_error(where + ": " + *f);
    }
    if (ctx.timeout_ms >= 0 && Clock::now() - start >= std::chrono::milliseconds(ctx.timeout_ms)) {
      lib.ncclCommAbort(comm);
      return timeout_error(where + ": ncclCommInitRankConfig did not finish within " + std::to_string(ctx.timeout_ms) +
                           " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (lib.ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclSystemError;
  }
  if (r != ncclSuccess) {
    const std::string text = std::string(lib.ncclGetErrorString(r)) + ": " + lib.ncclGetLastError(comm);
    if (comm != nullptr) lib.ncclCommAbort(comm);
    return Status(r == ncclInvalidUsage ? Code::kInvalidUsage : Code::kSystem,
                  where + ": ncclCommInitRankConfig: " + text);
  }
  cudaStream_t stream = nullptr;
  void* barrier_buf = nullptr;
  ce = lib.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ce == cudaSuccess) ce = lib.cudaMalloc(&barrier_buf, sizeof(int));
  if (ce != cudaSuccess) {
    lib.ncclCommAbort(comm);
    if (stream != nullptr) lib.cudaStreamDestroy(stream);
    return Status(Code::kSystem, where + ": creating the group's stream and barrier buffer: " +
                                     lib.cudaGetErrorString(ce));
  }
  // ncclGetVersion's code: major * 10000 + minor * 100 + patch (major * 1000
  // + minor * 100 + patch before 2.9).
  const int v = lib.nccl_version, major = v >= 20900 ? v / 10000 : v / 1000;
  const int minor = v >= 20900 ? v / 100 % 100 : v / 100 % 10;
  log(LogLevel::kDebug, "%s: NCCL %d.%d.%d communicator of %d ranks on GPU %s", where.c_str(), major, minor, v % 100,
      ctx.size, bus);
  return std::unique_ptr<Backend>(new NcclBackend(lib, ctx, comm, device, stream, barrier_buf));
}

#else  // !ACCRUN_HAVE_NCCL

Result<std::unique_ptr<Backend>> make_nccl_backend(const GroupContext& ctx) {
  return not_supported("NCCL group '" + ctx.name +
                       "': this build of accrun has no NCCL backend (nccl.h and cuda_runtime_api.h were not found at "
                       "build time; set CUDA_HOME and rebuild with ACCRUN_WITH_NCCL=ON)");
}

#endif  // ACCRUN_HAVE_NCCL

}  // namespace accrun::collectives
