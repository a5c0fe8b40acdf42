// nccl_suite [--auto] — the exact-result suite over an NCCL group, through the
// C API with device buffers, under accrun (nccl_launch.sh starts it).
//
// The suite (exact_suite.hpp) is written against host buffers; DeviceStaging
// is a Backend that copies each call's buffers to the GPU, calls libaccrun
// with them and a cudaStream_t, waits for the stream and copies the results
// back (inside group_start/group_end, at group_end).  Buffers that overlap on
// the host (in-place calls) share one device region, so aliasing is kept.
//
// Each rank uses the GPU accrun gave it (ACCRUN_GPU_IDS: CUDA_VISIBLE_DEVICES
// then shows just that one) or else the GPU numbered by its local rank.
// Where NCCL or a GPU is missing, every rank prints "nccl_suite: SKIP: why"
// and exits 0; CTest reports the test as skipped with that reason.
// --auto asks for ACCRUN_BACKEND_AUTO instead of ACCRUN_BACKEND_NCCL.
// --host-staging checks the staging itself where there is no GPU: "device"
// memory is host memory and the group is a store group.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "accrun/accrun.h"
#include "exact_suite.hpp"

namespace {

using accrun::Code;
using accrun::Status;
namespace ac = accrun::collectives;

// The CUDA runtime calls used, by dlopen (the test links nothing of CUDA).
struct Cuda {
  int (*get_device_count)(int*) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;  // kind 1: host to device, 2: device to host
  int (*stream_create)(void**) = nullptr;
  int (*stream_sync)(void*) = nullptr;
  const char* (*error_string)(int) = nullptr;

  std::string load() {
    void* h = nullptr;
    for (const char* n : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_GLOBAL)) != nullptr) break;
    if (h == nullptr) return "the CUDA runtime (libcudart.so) does not load";
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr)
      return "no NVIDIA driver here (libcuda.so.1 does not load)";
    get_device_count = reinterpret_cast<decltype(get_device_count)>(dlsym(h, "cudaGetDeviceCount"));
    set_device = reinterpret_cast<decltype(set_device)>(dlsym(h, "cudaSetDevice"));
    malloc_ = reinterpret_cast<decltype(malloc_)>(dlsym(h, "cudaMalloc"));
    free_ = reinterpret_cast<decltype(free_)>(dlsym(h, "cudaFree"));
    memcpy_ = reinterpret_cast<decltype(memcpy_)>(dlsym(h, "cudaMemcpy"));
    stream_create = reinterpret_cast<decltype(stream_create)>(dlsym(h, "cudaStreamCreate"));
    stream_sync = reinterpret_cast<decltype(stream_sync)>(dlsym(h, "cudaStreamSynchronize"));
    error_string = reinterpret_cast<decltype(error_string)>(dlsym(h, "cudaGetErrorString"));
    if (!get_device_count || !set_device || !malloc_ || !free_ || !memcpy_ || !stream_create || !stream_sync ||
        !error_string)
      return "the CUDA runtime lacks an entry point the test needs";
    return {};
  }

  // Host memory standing in for the GPU's (--host-staging).
  void on_host() {
    get_device_count = [](int* n) { *n = 1; return 0; };
    set_device = [](int) { return 0; };
    malloc_ = [](void** p, size_t n) { return (*p = std::malloc(n)) != nullptr ? 0 : 2; };
    free_ = [](void* p) { std::free(p); return 0; };
    memcpy_ = [](void* d, const void* s, size_t n, int) { std::memcpy(d, s, n); return 0; };
    stream_create = [](void** s) { *s = nullptr; return 0; };
    stream_sync = [](void*) { return 0; };
    error_string = [](int) { return "host staging error"; };
  }
};

Status from_rc(int rc, const std::string& what) {
  if (rc == ACCRUN_SUCCESS) return Status::ok();
  return Status(static_cast<Code>(rc), what + ": " + accrun_last_error());
}

class DeviceStaging final : public ac::Backend {
 public:
  DeviceStaging(Cuda& cuda, accrun_group_t g, void* stream) : cuda_(cuda), g_(g), stream_(stream) {}
  ~DeviceStaging() override { (void)finish(); }

  ac::BackendKind kind() const override { return ac::BackendKind::kNccl; }
  void set_timeout(int ms) override { (void)accrun_group_set_timeout(g_, ms); }

  Status allreduce(const void* s, void* r, std::size_t n, ac::DType d, ac::Op op, void*) override {
    const std::size_t b = n * accrun::testing::dt_size(d);
    return staged({{s, b, false}, {r, b, true}}, [&](void* const* dev) {
      return accrun_allreduce(g_, dev[0], dev[1], n, dt(d), op_of(op), stream_);
    }, "accrun_allreduce");
  }
  Status reduce(const void* s, void* r, std::size_t n, ac::DType d, ac::Op op, int root, void*) override {
    const std::size_t b = n * accrun::testing::dt_size(d);
    return staged({{s, b, false}, {r, b, true}}, [&](void* const* dev) {
      return accrun_reduce(g_, dev[0], dev[1], n, dt(d), op_of(op), root, stream_);
    }, "accrun_reduce");
  }
  Status broadcast(void* buf, std::size_t n, ac::DType d, int root, void*) override {
    const std::size_t b = n * accrun::testing::dt_size(d);
    return staged({{buf, b, true}}, [&](void* const* dev) {
      return accrun_broadcast(g_, dev[0], n, dt(d), root, stream_);
    }, "accrun_broadcast");
  }
  Status allgather(const void* s, void* r, std::size_t n, ac::DType d, void*) override {
    const std::size_t b = n * accrun::testing::dt_size(d);
    const std::size_t size = static_cast<std::size_t>(accrun_group_size(g_));
    return staged({{s, b, false}, {r, b * size, true}}, [&](void* const* dev) {
      return accrun_allgather(g_, dev[0], dev[1], n, dt(d), stream_);
    }, "accrun_allgather");
  }
  Status reducescatter(const void* s, void* r, std::size_t n, ac::DType d, ac::Op op, void*) override {
    const std::size_t b = n * accrun::testing::dt_size(d);
    const std::size_t size = static_cast<std::size_t>(accrun_group_size(g_));
    return staged({{s, b * size, false}, {r, b, true}}, [&](void* const* dev) {
      return accrun_reducescatter(g_, dev[0], dev[1], n, dt(d), op_of(op), stream_);
    }, "accrun_reducescatter");
  }
  Status barrier() override { return from_rc(accrun_barrier(g_), "accrun_barrier"); }
  Status send(const void* buf, std::size_t n, ac::DType d, int peer, void*) override {
    return staged({{buf, n * accrun::testing::dt_size(d), false}}, [&](void* const* dev) {
      return accrun_send(g_, dev[0], n, dt(d), peer, stream_);
    }, "accrun_send");
  }
  Status recv(void* buf, std::size_t n, ac::DType d, int peer, void*) override {
    return staged({{buf, n * accrun::testing::dt_size(d), true}}, [&](void* const* dev) {
      return accrun_recv(g_, dev[0], n, dt(d), peer, stream_);
    }, "accrun_recv");
  }
  Status group_start() override {
    Status st = from_rc(accrun_group_start(g_), "accrun_group_start");
    if (st.is_ok()) ++depth_;
    return st;
  }
  Status group_end() override {
    Status st = from_rc(accrun_group_end(g_), "accrun_group_end");
    if (st.is_ok() && --depth_ == 0) return finish();
    return st;
  }

 private:
  struct Span {
    const void* host;
    std::size_t bytes;
    bool out;  // copied back after the call
  };
  struct Region {
    char* lo;
    std::size_t bytes;
    void* dev;
  };
  struct CopyBack {
    void* host;
    const void* dev;
    std::size_t bytes;
  };

  static accrun_dtype_t dt(ac::DType d) { return static_cast<accrun_dtype_t>(d); }
  static accrun_op_t op_of(ac::Op o) { return static_cast<accrun_op_t>(o); }

  Status cuda(int rc, const char* what) const {
    if (rc == 0) return Status::ok();
    return Status(Code::kSystem, std::string(what) + ": " + cuda_.error_string(rc));
  }

  // Copies the spans to device regions (overlapping spans share one), runs
  // call with their device addresses and, outside a bracket, finishes.
  template <class F>
  Status staged(std::initializer_list<Span> spans, F call, const char* what) {
    // The union of the spans: an in-place call's buffers become one interval.
    std::vector<std::pair<char*, char*>> iv;
    for (const Span& s : spans) {
      char* lo = static_cast<char*>(const_cast<void*>(s.host));
      iv.emplace_back(lo, lo + std::max<std::size_t>(s.bytes, 1));
    }
    std::sort(iv.begin(), iv.end());
    std::vector<std::pair<char*, char*>> merged;
    for (const auto& i : iv) {
      if (!merged.empty() && i.first < merged.back().second) merged.back().second = std::max(merged.back().second, i.second);
      else merged.push_back(i);
    }
    for (const auto& [lo, hi] : merged) {
      bool inside = false;
      for (const Region& r : regions_) {
        if (lo >= r.lo && hi <= r.lo + r.bytes) inside = true;
        else if (lo < r.lo + r.bytes && r.lo < hi)
          return Status(Code::kInvalidArgument, "a buffer overlaps an earlier one of the bracket partially");
      }
      if (inside) continue;  // an earlier call of the bracket staged it
      Region r{lo, static_cast<std::size_t>(hi - lo), nullptr};
      ACCRUN_RETURN_IF_ERROR(cuda(cuda_.malloc_(&r.dev, r.bytes), "cudaMalloc"));
      regions_.push_back(r);
      ACCRUN_RETURN_IF_ERROR(cuda(cuda_.memcpy_(r.dev, lo, r.bytes, 1), "cudaMemcpy to the GPU"));
    }
    std::vector<void*> dev;
    for (const Span& s : spans) {
      char* lo = static_cast<char*>(const_cast<void*>(s.host));
      for (const Region& r : regions_) {
        if (lo < r.lo || lo >= r.lo + r.bytes) continue;
        void* d = static_cast<char*>(r.dev) + (lo - r.lo);
        dev.push_back(d);
        if (s.out) copy_back_.push_back({lo, d, s.bytes});
        break;
      }
    }
    Status st = from_rc(call(dev.data()), what);
    if (!st.is_ok() || depth_ == 0) {
      Status done = finish();
      return st.is_ok() ? done : st;
    }
    return st;
  }

  // Waits for the stream, copies the results back and frees the regions.
  Status finish() {
    Status st = cuda(cuda_.stream_sync(stream_), "cudaStreamSynchronize");
    for (const CopyBack& c : copy_back_)
      if (st.is_ok()) st = cuda(cuda_.memcpy_(c.host, c.dev, c.bytes, 2), "cudaMemcpy from the GPU");
    for (const Region& r : regions_) (void)cuda_.free_(r.dev);
    copy_back_.clear();
    regions_.clear();
    return st;
  }

  Cuda& cuda_;
  accrun_group_t g_;
  void* stream_;
  int depth_ = 0;
  std::vector<Region> regions_;  // staged for the call or the bracket in progress
  std::vector<CopyBack> copy_back_;
};

int skip(int rank, const std::string& why) {
  std::printf("nccl_suite: SKIP: rank %d: %s\n", rank, why.c_str());
  std::fflush(stdout);
  (void)accrun_finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool automatic = argc > 1 && std::strcmp(argv[1], "--auto") == 0;
  const bool host_staging = argc > 1 && std::strcmp(argv[1], "--host-staging") == 0;
  if (accrun_init() != ACCRUN_SUCCESS) {
    std::fprintf(stderr, "nccl_suite: accrun_init: %s\nFAIL\n", accrun_last_error());
    return 1;
  }
  const int rank = accrun_rank(), size = accrun_size(), local_rank = accrun_local_rank();
  Cuda cuda;
  if (host_staging) cuda.on_host();
  else if (std::string why = cuda.load(); !why.empty()) return skip(rank, why);
  int count = 0;
  if (int rc = cuda.get_device_count(&count); rc != 0 || count == 0)
    return skip(rank, std::string("no GPU: ") + (rc != 0 ? cuda.error_string(rc) : "0 devices"));
  // Every rank of the host decides alike, so none is left waiting for another.
  const char* given = std::getenv("ACCRUN_GPU_IDS");
  const bool own_gpu = host_staging || (given != nullptr && *given != '\0');
  const int device = own_gpu ? 0 : local_rank;
  if (!own_gpu && accrun_local_size() > count)
    return skip(rank, "needs a GPU per rank: " + std::to_string(accrun_local_size()) + " ranks on this host, " +
                          std::to_string(count) + " GPU(s)");
  if (int rc = cuda.set_device(device); rc != 0) return skip(rank, std::string("cudaSetDevice: ") + cuda.error_string(rc));

  accrun_group_t g = nullptr;
  const accrun_backend_t backend =
      host_staging ? ACCRUN_BACKEND_STORE : automatic ? ACCRUN_BACKEND_AUTO : ACCRUN_BACKEND_NCCL;
  int rc = accrun_group_init("nccl-suite", size, rank, backend, &g);
  if (rc == ACCRUN_ERR_NOT_SUPPORTED) return skip(rank, accrun_last_error());
  if (rc != ACCRUN_SUCCESS) {
    std::fprintf(stderr, "nccl_suite: rank %d: accrun_group_init: %s\nFAIL\n", rank, accrun_last_error());
    return 1;
  }
  void* stream = nullptr;
  if (int e = cuda.stream_create(&stream); e != 0) {
    std::fprintf(stderr, "nccl_suite: rank %d: cudaStreamCreate: %s\nFAIL\n", rank, cuda.error_string(e));
    return 1;
  }

  int failed = 0;
  int checks = 0;
  {
    DeviceStaging staging(cuda, g, stream);
    accrun::testing::ExactSuite suite(staging, rank, size, "nccl");
    suite.run_all({1, 7, 1000, 65537}, /*grouped_collectives=*/!host_staging);
    for (const std::string& f : suite.failures()) std::fprintf(stderr, "FAIL %s\n", f.c_str());
    failed = static_cast<int>(suite.failures().size());
    checks = suite.checks();
  }
  // The tally travels through a store group: the NCCL group may be the broken part.
  accrun_group_t tally = nullptr;
  int total_failed = failed;
  if (accrun_group_init("nccl-suite-tally", size, rank, ACCRUN_BACKEND_STORE, &tally) != ACCRUN_SUCCESS ||
      accrun_allreduce(tally, &failed, &total_failed, 1, ACCRUN_INT32, ACCRUN_SUM, nullptr) != ACCRUN_SUCCESS) {
    std::fprintf(stderr, "nccl_suite: rank %d: tally: %s\nFAIL\n", rank, accrun_last_error());
    return 1;
  }
  if (rank == 0) {
    if (total_failed == 0) std::printf("nccl_suite: PASS (%d ranks, %d checks on rank 0)\n", size, checks);
    else std::printf("nccl_suite: FAIL (%d failures)\n", total_failed);
  }
  (void)accrun_group_destroy(g);
  (void)accrun_group_destroy(tally);
  (void)accrun_finalize();
  return total_failed == 0 ? 0 : 1;
}
