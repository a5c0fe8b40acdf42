// nccl_faults MODE — the NCCL backend's failure paths, under accrun, over
// the test-built fake NCCL and CUDA runtime (tests/fake_cuda; the test sets
// LD_LIBRARY_PATH and the FAKE_* variables).  Each rank prints
// "nccl_faults: PASS MODE rank R ..." or "nccl_faults: FAIL ...".
//
//   timeout      operations never finish while new ones keep coming: the
//                oldest must still time out (group timeout 1 s)
//   peer_death   rank 0's operation stays "being queued" and rank 1 dies:
//                rank 0 gets ACCRUN_ERR_REMOTE naming rank 1 within 5 s
//   abort_spread rank 0's communicator fails: rank 1, whose NCCL is fine,
//                aborts too and names rank 0 within 5 s
//   bracket      a failure while a group_start bracket is open is reported
//                by group_end, after NCCL's group end (no call on an
//                aborted communicator)
//   auto_route   AUTO sends host buffers to the host backend (exact sums)
//                and device buffers to NCCL; an NCCL group refuses host
//                buffers
//   devices      calls made with another device current run on the
//                group's device and stream, never the legacy stream
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <accrun/accrun.h>

namespace {

using Clock = std::chrono::steady_clock;

int rank = 0;
int size = 1;
bool failed = false;
std::string mode;

void fail(const std::string& what) {
  std::printf("nccl_faults: FAIL %s rank %d: %s\n", mode.c_str(), rank, what.c_str());
  std::fflush(stdout);
  failed = true;
}

void ok(const char* rc_what, int rc) {
  if (rc != ACCRUN_SUCCESS) fail(std::string(rc_what) + ": " + accrun_strerror(rc) + ": " + accrun_last_error());
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The fake CUDA runtime, as the program sees it (the same library the
// backend loads: one soname, one copy).
struct Cuda {
  int (*malloc_)(void**, size_t) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*get_device)(int*) = nullptr;
  bool load() {
    void* h = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return false;
    malloc_ = reinterpret_cast<decltype(malloc_)>(dlsym(h, "cudaMalloc"));
    set_device = reinterpret_cast<decltype(set_device)>(dlsym(h, "cudaSetDevice"));
    get_device = reinterpret_cast<decltype(get_device)>(dlsym(h, "cudaGetDevice"));
    return malloc_ && set_device && get_device;
  }
  float* floats(std::size_t n) {
    void* p = nullptr;
    return malloc_(&p, n * sizeof(float)) == 0 ? static_cast<float*>(p) : nullptr;
  }
};

// This process's lines in the fake NCCL's log.
std::vector<std::string> my_log() {
  std::vector<std::string> out;
  const char* path = std::getenv("FAKE_NCCL_LOG");
  if (path == nullptr) return out;
  std::ifstream in(path);
  const std::string tag = " pid " + std::to_string(getpid()) + ": ";
  for (std::string line; std::getline(in, line);) {
    if (line.find(tag) != std::string::npos) out.push_back(line.substr(line.find(tag) + tag.size()));
  }
  return out;
}

int count_log(const std::string& what) {
  int n = 0;
  for (const auto& l : my_log()) n += l.find(what) != std::string::npos;
  return n;
}

// Calls allreduce every `gap` until one fails or `limit` passes.
int keep_calling(accrun_group_t g, float* buf, std::chrono::milliseconds gap, double limit, double* took) {
  const auto t0 = Clock::now();
  int rc = ACCRUN_SUCCESS;
  while (rc == ACCRUN_SUCCESS && since(t0) < limit) {
    rc = accrun_allreduce(g, buf, buf, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr);
    if (rc == ACCRUN_SUCCESS) std::this_thread::sleep_for(gap);
  }
  *took = since(t0);
  return rc;
}

void expect_error(int rc, int want, double took, double limit, const std::vector<std::string>& words) {
  const std::string msg = accrun_last_error();
  if (rc != want) {
    fail(std::string("expected ") + accrun_strerror(want) + ", got " + accrun_strerror(rc) + " after " +
         std::to_string(took) + " s: " + msg);
    return;
  }
  if (took > limit) fail("took " + std::to_string(took) + " s, more than " + std::to_string(limit) + " s: " + msg);
  for (const auto& w : words) {
    if (msg.find(w) == std::string::npos) fail("the error does not say '" + w + "': " + msg);
  }
  if (count_log("abort") != 1) fail("the fake NCCL saw " + std::to_string(count_log("abort")) + " aborts, not 1");
  std::printf("rank %d: %s (%.2f s)\n", rank, msg.c_str(), took);
}

}  // namespace

int main(int argc, char** argv) {
  mode = argc > 1 ? argv[1] : "";
  Cuda cuda;
  if (!cuda.load()) {
    std::printf("nccl_faults: FAIL: the fake CUDA runtime does not load: %s\n", dlerror());
    return 1;
  }
  ok("accrun_init", accrun_init());
  rank = accrun_rank();
  size = accrun_size();
  float* dev = cuda.floats(1024);
  const bool auto_group = mode == "auto_route";
  // A store group to finish together on: a member that ends early would
  // otherwise look like a failed peer to the others.
  accrun_group_t done;
  ok("done group", accrun_group_init("done", size, rank, ACCRUN_BACKEND_STORE, &done));
  accrun_group_t g;
  ok("accrun_group_init", accrun_group_init("faults", size, rank, auto_group ? ACCRUN_BACKEND_AUTO : ACCRUN_BACKEND_NCCL, &g));
  if (failed) return 1;

  if (mode == "timeout") {
    ok("set_timeout", accrun_group_set_timeout(g, 1000));
    double took = 0;
    // A new call every 100 ms: each one younger than the timeout, the first
    // (stuck) one older.
    const int rc = keep_calling(g, dev, std::chrono::milliseconds(100), 10, &took);
    expect_error(rc, ACCRUN_ERR_TIMEOUT, took, 3.5, {"ncclAllReduce", "did not complete within", "1000 ms"});
  } else if (mode == "peer_death") {
    ok("first allreduce", accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
    if (rank == 1) std::_Exit(3);
    const auto t0 = Clock::now();
    const int rc = accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr);
    expect_error(rc, ACCRUN_ERR_REMOTE, since(t0), 5, {"group rank 1", "failed"});
  } else if (mode == "abort_spread") {
    double took = 0;
    const int rc = keep_calling(g, dev, std::chrono::milliseconds(50), 10, &took);
    if (rank == 0) {
      expect_error(rc, ACCRUN_ERR_REMOTE, took, 5, {"asynchronous error", "aborted"});
    } else {
      expect_error(rc, ACCRUN_ERR_REMOTE, took, 5, {"group rank 0", "aborted its NCCL communicator too"});
    }
  } else if (mode == "bracket") {
    ok("allreduce 1", accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
    ok("allreduce 2", accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));  // fails 300 ms later
    const auto t0 = Clock::now();
    ok("group_start", accrun_group_start(g));
    ok("send", accrun_send(g, dev, 8, ACCRUN_FLOAT32, 1 - rank, nullptr));
    ok("recv", accrun_recv(g, dev + 8, 8, ACCRUN_FLOAT32, 1 - rank, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the watchdog sees the failure now
    const int rc = accrun_group_end(g);
    expect_error(rc, ACCRUN_ERR_REMOTE, since(t0), 5, {"asynchronous error", "reported at its end"});
    const int after = accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr);
    if (after != ACCRUN_ERR_REMOTE) fail(std::string("a call after the failed bracket: ") + accrun_strerror(after));
  } else if (mode == "auto_route") {
    std::vector<long long> host(64);
    for (int i = 0; i < 64; ++i) host[static_cast<std::size_t>(i)] = rank + i;
    ok("host allreduce", accrun_allreduce(g, host.data(), host.data(), 64, ACCRUN_INT64, ACCRUN_SUM, nullptr));
    for (int i = 0; i < 64; ++i) {
      if (host[static_cast<std::size_t>(i)] != static_cast<long long>(size) * (size - 1) / 2 + static_cast<long long>(size) * i) {
        fail("host buffers summed wrong at element " + std::to_string(i));
        break;
      }
    }
    if (count_log("ncclAllReduce") != 0) fail("a host-buffer allreduce reached NCCL");
    ok("device allreduce", accrun_allreduce(g, dev, dev, 16, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
    if (count_log("ncclAllReduce count=16") != 1) fail("the device-buffer allreduce did not reach NCCL");
    const int mixed = accrun_allreduce(g, dev, host.data(), 16, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr);
    if (mixed != ACCRUN_ERR_INVALID_ARGUMENT) fail(std::string("mixed buffers: ") + accrun_strerror(mixed));
    ok("barrier", accrun_barrier(g));
    accrun_group_t n;
    ok("nccl group", accrun_group_init("explicit", size, rank, ACCRUN_BACKEND_NCCL, &n));
    const int rc = accrun_allreduce(n, host.data(), host.data(), 64, ACCRUN_INT64, ACCRUN_SUM, nullptr);
    const std::string msg = accrun_last_error();
    if (rc != ACCRUN_ERR_INVALID_ARGUMENT || msg.find("is host memory") == std::string::npos)
      fail(std::string("a host buffer on an NCCL group: ") + accrun_strerror(rc) + ": " + msg);
    ok("destroy nccl group", accrun_group_destroy(n));
  } else if (mode == "devices") {
    ok("set device 1", cuda.set_device(1));
    ok("allreduce", accrun_allreduce(g, dev, dev, 4, ACCRUN_FLOAT32, ACCRUN_SUM, nullptr));
    ok("barrier", accrun_barrier(g));
    int now = -1;
    cuda.get_device(&now);
    if (now != 1) fail("the calling thread's device was changed to " + std::to_string(now));
    if (count_log("stream=default") != 0) fail("NCCL work went to a default stream");
    if (count_log("FAULT") != 0) fail("the fake NCCL saw a fault");
    if (count_log("stream=own device=0") != 2) fail("the allreduce and the barrier did not run on device 0's own stream");
  } else {
    fail("unknown mode");
  }
  accrun_group_destroy(g);
  if (mode != "peer_death") ok("final barrier", accrun_barrier(done));
  accrun_group_destroy(done);
  accrun_finalize();
  if (!failed) std::printf("nccl_faults: PASS %s rank %d\n", mode.c_str(), rank);
  return failed ? 1 : 0;
}
