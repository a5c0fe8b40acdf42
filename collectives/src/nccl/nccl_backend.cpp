// The NCCL backend (ACCRUN_BACKEND_NCCL).
//
// NCCL and the CUDA runtime are loaded with dlopen on first use and never
// linked, so libaccrun builds and runs where CUDA is absent and says why
// NCCL is unavailable.  The headers give the types only (ACCRUN_HAVE_NCCL).
//
// A group is one non-blocking NCCL communicator (ncclCommInitRankConfig,
// blocking = 0).  Group rank 0 makes the unique id and publishes it in the
// group's directory (already scoped to the group's epoch, so no stale id can
// be read); the others wait for it with the group's timeout.  A watchdog
// thread polls ncclCommGetAsyncError, the job's failure notices and, with a
// timeout set, the completion of the last queued operation: on an error, a
// dead peer or a timeout it aborts the communicator, and the next call on the
// group returns that error with NCCL's text.
//
// Operations are queued on the caller's cudaStream_t and return once queued,
// like NCCL itself: completion is the stream's business.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "accrun/backend.hpp"
#include "accrun/config.h"
#include "accrun/log.hpp"

#if ACCRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace accrun::collectives {

#if ACCRUN_HAVE_NCCL
namespace {

// The entry points used, resolved from the loaded libraries.
struct NcclLib {
  decltype(&::cudaGetDeviceCount) cudaGetDeviceCount = nullptr;
  decltype(&::cudaGetDevice) cudaGetDevice = nullptr;
  decltype(&::cudaSetDevice) cudaSetDevice = nullptr;
  decltype(&::cudaDeviceGetPCIBusId) cudaDeviceGetPCIBusId = nullptr;
  decltype(&::cudaGetErrorString) cudaGetErrorString = nullptr;
  decltype(&::cudaEventCreateWithFlags) cudaEventCreateWithFlags = nullptr;
  decltype(&::cudaEventRecord) cudaEventRecord = nullptr;
  decltype(&::cudaEventQuery) cudaEventQuery = nullptr;
  decltype(&::cudaEventDestroy) cudaEventDestroy = nullptr;
  cudaError_t (*cudaMalloc)(void**, size_t) = nullptr;  // overloaded in C++: spelled out
  decltype(&::cudaFree) cudaFree = nullptr;

  decltype(&::ncclGetVersion) ncclGetVersion = nullptr;
  decltype(&::ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) ncclCommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) ncclCommGetAsyncError = nullptr;
  decltype(&::ncclCommAbort) ncclCommAbort = nullptr;
  decltype(&::ncclCommFinalize) ncclCommFinalize = nullptr;
  decltype(&::ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::ncclGetLastError) ncclGetLastError = nullptr;
  decltype(&::ncclAllReduce) ncclAllReduce = nullptr;
  decltype(&::ncclReduce) ncclReduce = nullptr;
  decltype(&::ncclBroadcast) ncclBroadcast = nullptr;
  decltype(&::ncclAllGather) ncclAllGather = nullptr;
  decltype(&::ncclReduceScatter) ncclReduceScatter = nullptr;
  decltype(&::ncclSend) ncclSend = nullptr;
  decltype(&::ncclRecv) ncclRecv = nullptr;
  decltype(&::ncclGroupStart) ncclGroupStart = nullptr;
  decltype(&::ncclGroupEnd) ncclGroupEnd = nullptr;

  int device_count = 0;
  int nccl_version = 0;
};

struct Loaded {
  std::unique_ptr<NcclLib> lib;  // null when unavailable
  std::string why;               // why it is unavailable
};

template <class F>
bool resolve(void* handle, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
  return *fn != nullptr;
}

Loaded load() {
  Loaded out;
  void* cudart = nullptr;
  std::string cudart_err;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    cudart = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (cudart != nullptr) break;
    if (cudart_err.empty()) cudart_err = dlerror();
  }
  if (cudart == nullptr) {
    out.why = "the CUDA runtime does not load (" + cudart_err + ")";
    return out;
  }
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (nccl == nullptr) {
    const char* e = dlerror();
    out.why = std::string("libnccl.so.2 does not load (") + (e ? e : "unknown") + ")";
    return out;
  }
  auto lib = std::make_unique<NcclLib>();
  std::string missing;
  resolve(cudart, "cudaGetDeviceCount", &lib->cudaGetDeviceCount, &missing);
  resolve(cudart, "cudaGetDevice", &lib->cudaGetDevice, &missing);
  resolve(cudart, "cudaSetDevice", &lib->cudaSetDevice, &missing);
  resolve(cudart, "cudaDeviceGetPCIBusId", &lib->cudaDeviceGetPCIBusId, &missing);
  resolve(cudart, "cudaGetErrorString", &lib->cudaGetErrorString, &missing);
  resolve(cudart, "cudaEventCreateWithFlags", &lib->cudaEventCreateWithFlags, &missing);
  resolve(cudart, "cudaEventRecord", &lib->cudaEventRecord, &missing);
  resolve(cudart, "cudaEventQuery", &lib->cudaEventQuery, &missing);
  resolve(cudart, "cudaEventDestroy", &lib->cudaEventDestroy, &missing);
  resolve(cudart, "cudaMalloc", &lib->cudaMalloc, &missing);
  resolve(cudart, "cudaFree", &lib->cudaFree, &missing);
  if (!missing.empty()) {
    out.why = "the CUDA runtime lacks " + missing;
    return out;
  }
  resolve(nccl, "ncclGetVersion", &lib->ncclGetVersion, &missing);
  resolve(nccl, "ncclGetUniqueId", &lib->ncclGetUniqueId, &missing);
  resolve(nccl, "ncclCommInitRankConfig", &lib->ncclCommInitRankConfig, &missing);
  resolve(nccl, "ncclCommGetAsyncError", &lib->ncclCommGetAsyncError, &missing);
  resolve(nccl, "ncclCommAbort", &lib->ncclCommAbort, &missing);
  resolve(nccl, "ncclCommFinalize", &lib->ncclCommFinalize, &missing);
  resolve(nccl, "ncclCommDestroy", &lib->ncclCommDestroy, &missing);
  resolve(nccl, "ncclGetErrorString", &lib->ncclGetErrorString, &missing);
  resolve(nccl, "ncclGetLastError", &lib->ncclGetLastError, &missing);
  resolve(nccl, "ncclAllReduce", &lib->ncclAllReduce, &missing);
  resolve(nccl, "ncclReduce", &lib->ncclReduce, &missing);
  resolve(nccl, "ncclBroadcast", &lib->ncclBroadcast, &missing);
  resolve(nccl, "ncclAllGather", &lib->ncclAllGather, &missing);
  resolve(nccl, "ncclReduceScatter", &lib->ncclReduceScatter, &missing);
  resolve(nccl, "ncclSend", &lib->ncclSend, &missing);
  resolve(nccl, "ncclRecv", &lib->ncclRecv, &missing);
  resolve(nccl, "ncclGroupStart", &lib->ncclGroupStart, &missing);
  resolve(nccl, "ncclGroupEnd", &lib->ncclGroupEnd, &missing);
  if (!missing.empty()) {
    out.why = "libnccl.so.2 lacks " + missing + " (accrun needs NCCL 2.14 or later for non-blocking communicators)";
    return out;
  }
  lib->ncclGetVersion(&lib->nccl_version);
  // Without the driver the runtime only says its version is "insufficient";
  // name the real cause.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    out.why = "no NVIDIA driver here (libcuda.so.1 does not load), so no GPU";
    return out;
  }
  cudaError_t ce = lib->cudaGetDeviceCount(&lib->device_count);
  if (ce != cudaSuccess || lib->device_count == 0) {
    out.why = ce != cudaSuccess
                  ? std::string("the CUDA runtime sees no GPU (cudaGetDeviceCount: ") + lib->cudaGetErrorString(ce) + ")"
                  : std::string("the CUDA runtime sees no GPU (cudaGetDeviceCount: 0 devices)");
    return out;
  }
  out.lib = std::move(lib);
  return out;
}

// Loaded once per process (dlopen handles are process-wide) and kept: CUDA
// libraries are not safe to unload while a context may exist.
const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

ncclDataType_t to_nccl(DType dt) {
  switch (dt) {
    case DType::kInt8: return ncclInt8;
    case DType::kUInt8: return ncclUint8;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(Op op) {
  switch (op) {
    case Op::kSum: return ncclSum;
    case Op::kProd: return ncclProd;
    case Op::kMin: return ncclMin;
    case Op::kMax: return ncclMax;
  }
  return ncclSum;
}

std::string to_hex(const void* p, std::size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 15]);
  }
  return s;
}

bool from_hex(const std::string& s, void* p, std::size_t n) {
  if (s.size() != 2 * n) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const int hi = nib(s[2 * i]);
    const int lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

std::string describe_member(const GroupContext& ctx, int g) {
  const Member& m = ctx.members[static_cast<std::size_t>(g)];
  return "group rank " + std::to_string(g) + " (job rank " + std::to_string(m.job_rank) + " on host " +
         (m.host.empty() ? std::string("?") : m.host) + ")";
}

std::optional<std::string> failed_peer(const PeerMonitor* peers, const std::vector<Member>& members, int self) {
  if (peers == nullptr) return std::nullopt;
  for (std::size_t g = 0; g < members.size(); ++g) {
    if (static_cast<int>(g) == self) continue;
    if (auto f = peers->failure(members[g].job_rank)) {
      return "group rank " + std::to_string(g) + " (job rank " + std::to_string(members[g].job_rank) + " on host " +
             members[g].host + ") failed: " + *f;
    }
  }
  return std::nullopt;
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const NcclLib& lib, const GroupContext& ctx, ncclComm_t comm, int device, cudaEvent_t event,
              cudaEvent_t barrier_event, void* barrier_buf)
      : lib_(lib),
        name_(ctx.name),
        rank_(ctx.rank),
        size_(ctx.size),
        members_(ctx.members),
        peers_(ctx.peers),
        device_(device),
        comm_(comm),
        event_(event),
        barrier_event_(barrier_event),
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
    if (comm_ != nullptr) {
      // Flush and free; a communicator that does not finish in time (a peer
      // gone) is aborted so the destructor cannot hang.
      ncclResult_t r = lib_.ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) r = settle(10000, nullptr);
      if (r == ncclSuccess) {
        lib_.ncclCommDestroy(comm_);
      } else {
        lib_.ncclCommAbort(comm_);
      }
    }
    lib_.cudaEventDestroy(event_);
    lib_.cudaEventDestroy(barrier_event_);
    lib_.cudaFree(barrier_buf_);
  }

  BackendKind kind() const override { return BackendKind::kNccl; }
  void set_timeout(int timeout_ms) override { timeout_ms_.store(timeout_ms); }

  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    return queued("ncclAllReduce", lib_.ncclAllReduce(send, recv, count, to_nccl(dt), to_nccl(op), comm_, cast(stream)),
                  stream);
  }
  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ACCRUN_RETURN_IF_ERROR(check_rank("reduce", "root", root));
    return queued("ncclReduce",
                  lib_.ncclReduce(send, recv, count, to_nccl(dt), to_nccl(op), root, comm_, cast(stream)), stream);
  }
  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ACCRUN_RETURN_IF_ERROR(check_rank("broadcast", "root", root));
    return queued("ncclBroadcast", lib_.ncclBroadcast(buf, buf, count, to_nccl(dt), root, comm_, cast(stream)), stream);
  }
  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    return queued("ncclAllGather", lib_.ncclAllGather(send, recv, count_per_rank, to_nccl(dt), comm_, cast(stream)),
                  stream);
  }
  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    return queued("ncclReduceScatter",
                  lib_.ncclReduceScatter(send, recv, recv_count, to_nccl(dt), to_nccl(op), comm_, cast(stream)), stream);
  }
  // NCCL has no barrier: an allreduce of one int on the default stream,
  // waited for, is one.  Unlike the other calls it blocks until every member
  // has arrived (or the group fails).
  Status barrier() override {
    std::unique_lock<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ACCRUN_RETURN_IF_ERROR(queued("ncclAllReduce (barrier)",
                                  lib_.ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, nullptr),
                                  nullptr));
    if (depth_ > 0) return Status::ok();  // completes with the bracket
    cudaError_t ce = lib_.cudaEventRecord(barrier_event_, nullptr);
    if (ce != cudaSuccess) return Status(Code::kSystem, "group '" + name_ + "': cudaEventRecord: " + lib_.cudaGetErrorString(ce));
    // Polls the event: yielding for the first millisecond (a barrier is
    // usually short), then sleeping 50 µs between looks.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    for (;;) {
      lock.unlock();
      ce = lib_.cudaEventQuery(barrier_event_);
      if (ce == cudaSuccess) return Status::ok();
      if (ce != cudaErrorNotReady) {
        return Status(Code::kSystem, "group '" + name_ + "': barrier: " + lib_.cudaGetErrorString(ce));
      }
      if (std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      lock.lock();
      ACCRUN_RETURN_IF_ERROR(usable());  // the watchdog saw a failure or a timeout
    }
  }
  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ACCRUN_RETURN_IF_ERROR(check_rank("send", "peer", peer));
    return queued("ncclSend", lib_.ncclSend(buf, count, to_nccl(dt), peer, comm_, cast(stream)), stream);
  }
  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ACCRUN_RETURN_IF_ERROR(check_rank("recv", "peer", peer));
    return queued("ncclRecv", lib_.ncclRecv(buf, count, to_nccl(dt), peer, comm_, cast(stream)), stream);
  }
  Status group_start() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCRUN_RETURN_IF_ERROR(usable());
    ncclResult_t r = lib_.ncclGroupStart();
    if (r != ncclSuccess) return nccl_error("ncclGroupStart", r);
    ++depth_;
    return Status::ok();
  }
  Status group_end() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (depth_ == 0) return invalid_usage("group_end on group '" + name_ + "' without a matching group_start");
    --depth_;
    ncclResult_t r = lib_.ncclGroupEnd();
    ACCRUN_RETURN_IF_ERROR(usable());
    return queued("ncclGroupEnd", r, last_stream_);
  }

 private:
  static cudaStream_t cast(void* stream) { return static_cast<cudaStream_t>(stream); }

  Status usable() const { return error_; }

  Status check_rank(const char* what, const char* role, int r) const {
    if (r < 0 || r >= size_) {
      return invalid_argument(std::string(what) + " on group '" + name_ + "': " + role + " " + std::to_string(r) +
                              " is out of range (group size " + std::to_string(size_) + ")");
    }
    return Status::ok();
  }

  Status nccl_error(const char* call, ncclResult_t r) {
    const char* last = lib_.ncclGetLastError(comm_);
    std::string text = std::string(lib_.ncclGetErrorString(r)) + (last && *last ? std::string(": ") + last : "");
    const Code code = r == ncclInvalidArgument ? Code::kInvalidArgument
                      : r == ncclInvalidUsage  ? Code::kInvalidUsage
                      : r == ncclRemoteError   ? Code::kRemote
                                               : Code::kSystem;
    return {code, "group '" + name_ + "': " + call + ": " + text};
  }

  // Waits while the non-blocking communicator reports ncclInProgress (an
  // operation still being queued), watching the timeout.  Caller holds mu_.
  ncclResult_t settle(int timeout_ms, bool* timed_out) {
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t state = ncclInProgress;
    for (;;) {
      if (lib_.ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclSystemError;
      if (state != ncclInProgress) return state;
      if (timeout_ms >= 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(timeout_ms)) {
        if (timed_out != nullptr) *timed_out = true;
        return ncclInProgress;
      }
      std::this_thread::yield();
    }
  }

  // After a call that queues work: settle, turn failures into the group's
  // error (aborting the communicator), and note the work for the watchdog.
  Status queued(const char* call, ncclResult_t r, void* stream) {
    if (r == ncclInProgress) {
      bool timed_out = false;
      r = settle(timeout_ms_.load(), &timed_out);
      if (timed_out) {
        fail_locked(timeout_error("group '" + name_ + "': " + call + " was still being queued after " +
                                  std::to_string(timeout_ms_.load()) + " ms; the NCCL communicator was aborted"));
        return error_;
      }
    }
    if (r != ncclSuccess) {
      Status st = nccl_error(call, r);
      if (r != ncclInvalidArgument && r != ncclInvalidUsage) fail_locked(st);
      return st;
    }
    last_stream_ = stream;
    if (depth_ == 0 && timeout_ms_.load() >= 0) {
      // Lets the watchdog see whether the work finishes within the timeout.
      if (lib_.cudaEventRecord(event_, cast(stream)) == cudaSuccess) {
        outstanding_ = true;
        queued_at_ = std::chrono::steady_clock::now();
      }
    }
    return Status::ok();
  }

  // Records the group's error and aborts the communicator.  Caller holds mu_.
  void fail_locked(Status st) {
    if (!error_.is_ok()) return;
    error_ = std::move(st);
    log(LogLevel::kWarn, "%s", error_.message().c_str());
    if (comm_ != nullptr) {
      lib_.ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  void watch() {
    lib_.cudaSetDevice(device_);  // events and NCCL calls from this thread use the group's device
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_ || !error_.is_ok() || comm_ == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      if (lib_.ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        Status st = nccl_error("asynchronous error", async);
        fail_locked(Status(st.code() == Code::kSystem ? Code::kRemote : st.code(), st.message()));
        continue;
      }
      if (auto f = failed_peer(peers_, members_, rank_)) {
        fail_locked(remote_error("group '" + name_ + "': " + *f + "; the NCCL communicator was aborted"));
        continue;
      }
      const int t = timeout_ms_.load();
      if (outstanding_) {
        if (lib_.cudaEventQuery(event_) == cudaSuccess) {
          outstanding_ = false;
        } else if (t >= 0 && std::chrono::steady_clock::now() - queued_at_ >= std::chrono::milliseconds(t)) {
          fail_locked(timeout_error("group '" + name_ + "': the last operation did not complete within " +
                                    std::to_string(t) + " ms; the NCCL communicator was aborted"));
        }
      }
    }
  }

  const NcclLib& lib_;
  std::string name_;
  int rank_;
  int size_;
  std::vector<Member> members_;
  const PeerMonitor* peers_;
  int device_;

  std::mutex mu_;  // guards everything below; NCCL calls on comm_ happen under it
  std::condition_variable cv_;
  ncclComm_t comm_;
  cudaEvent_t event_;          // after the last queued operation (timeouts)
  cudaEvent_t barrier_event_;  // after a barrier's allreduce
  void* barrier_buf_;          // one device int for the barrier
  std::atomic<int> timeout_ms_;
  Status error_;  // once set, every call returns it
  int depth_ = 0;
  void* last_stream_ = nullptr;
  bool outstanding_ = false;
  std::chrono::steady_clock::time_point queued_at_;
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
      return other.status().with_context("NCCL group '" + ctx.name + "': waiting for " + describe_member(ctx, g) +
                                         " to name its GPU");
    }
    if (*other == bus_id) {
      return invalid_usage("NCCL group '" + ctx.name + "': " + describe_member(ctx, ctx.rank) + " and " +
                           describe_member(ctx, g) + " use the same GPU (" + bus_id +
                           "); NCCL needs one whole GPU per rank, so ranks sharing a GPU (fractional "
                           "--gpus-per-rank) cannot form an NCCL group: use the store or MPI backend");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> make_nccl_backend(const GroupContext& ctx) {
  const std::string where = "NCCL group '" + ctx.name + "'";
  const Loaded& l = loaded();
  if (!l.lib) return not_supported(where + ": NCCL is unavailable: " + l.why);
  const NcclLib& lib = *l.lib;
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
    if (ctx.size > 1) ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish("nccl.id", to_hex(&id, sizeof id)));
  } else {
    Result<std::string> got = ctx.rendezvous->lookup("nccl.id", ctx.timeout_ms);
    if (!got.is_ok()) {
      return got.status().with_context(where + ": " + describe_member(ctx, 0) +
                                        " did not publish the NCCL unique id (is it creating the group?)");
    }
    if (!from_hex(*got, &id, sizeof id)) return Status(Code::kSystem, where + ": malformed NCCL unique id in the directory");
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = lib.ncclCommInitRankConfig(&comm, ctx.size, id, ctx.rank, &config);
  const auto start = std::chrono::steady_clock::now();
  while (r == ncclInProgress && comm != nullptr) {
    if (auto f = failed_peer(ctx.peers, ctx.members, ctx.rank)) {
      lib.ncclCommAbort(comm);
      return remote_error(where + ": " + *f);
    }
    if (ctx.timeout_ms >= 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(ctx.timeout_ms)) {
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
  cudaEvent_t event = nullptr;
  cudaEvent_t barrier_event = nullptr;
  void* barrier_buf = nullptr;
  ce = lib.cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (ce == cudaSuccess) ce = lib.cudaEventCreateWithFlags(&barrier_event, cudaEventDisableTiming);
  if (ce == cudaSuccess) ce = lib.cudaMalloc(&barrier_buf, sizeof(int));
  if (ce != cudaSuccess) {
    lib.ncclCommAbort(comm);
    if (event != nullptr) lib.cudaEventDestroy(event);
    if (barrier_event != nullptr) lib.cudaEventDestroy(barrier_event);
    return Status(Code::kSystem, where + ": creating CUDA events and the barrier buffer: " + lib.cudaGetErrorString(ce));
  }
  log(LogLevel::kDebug, "%s: NCCL %d communicator of %d ranks on GPU %s", where.c_str(), lib.nccl_version, ctx.size,
      bus);
  return std::unique_ptr<Backend>(new NcclBackend(lib, ctx, comm, device, event, barrier_event, barrier_buf));
}

bool nccl_loadable(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.lib ? std::string() : l.why;
  return l.lib != nullptr;
}

#else  // !ACCRUN_HAVE_NCCL

Result<std::unique_ptr<Backend>> make_nccl_backend(const GroupContext& ctx) {
  return not_supported("NCCL group '" + ctx.name +
                       "': this build of accrun has no NCCL backend (nccl.h and cuda_runtime_api.h were not found at "
                       "build time; set CUDA_HOME and rebuild with ACCRUN_WITH_NCCL=ON)");
}

bool nccl_loadable(std::string* why) {
  if (why != nullptr) *why = "this build of accrun has no NCCL backend";
  return false;
}

#endif  // ACCRUN_HAVE_NCCL

}  // namespace accrun::collectives
