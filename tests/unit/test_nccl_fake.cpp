// The NCCL backend in one process against the test-built fake NCCL and CUDA
// runtime (tests/fake_cuda), loaded first by absolute path so the backend's
// own dlopen by soname finds them: where buffers live, AUTO's routing by
// buffer, and the failure paths of a group (timeouts, NCCL still queueing,
// a failed peer, a failure inside a bracket, a host pointer).  Under
// ASan/UBSan in the sanitized tier, with the watchdog thread running.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"

namespace ac = accrun::collectives;
using accrun::Code;
using accrun::Result;
using accrun::Status;
using Clock = std::chrono::steady_clock;

namespace {

struct Fakes {
  void* cudart = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  Fakes() {
    cudart = dlopen(ACCRUN_FAKE_CUDA_DIR "/libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    dlopen(ACCRUN_FAKE_CUDA_DIR "/libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    dlopen(ACCRUN_FAKE_CUDA_DIR "/libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (cudart != nullptr) {
      malloc_ = reinterpret_cast<decltype(malloc_)>(dlsym(cudart, "cudaMalloc"));
      free_ = reinterpret_cast<decltype(free_)>(dlsym(cudart, "cudaFree"));
    }
  }
  float* device(std::size_t n) {
    void* p = nullptr;
    return malloc_ != nullptr && malloc_(&p, n * sizeof(float)) == 0 ? static_cast<float*>(p) : nullptr;
  }
};
Fakes& fakes() {
  static Fakes f;
  return f;
}
const bool kLoaded = fakes().cudart != nullptr;  // before the backend's first dlopen

// The fake NCCL's behaviour for communicators made from now on.
void fake_mode(const char* mode, int after = 0, int delay_ms = 0) {
  setenv("FAKE_NCCL_MODE", mode, 1);
  setenv("FAKE_NCCL_AFTER", std::to_string(after).c_str(), 1);
  setenv("FAKE_NCCL_DELAY_MS", std::to_string(delay_ms).c_str(), 1);
  unsetenv("FAKE_NCCL_RANKS");
}

class MapRendezvous final : public ac::Rendezvous {
 public:
  Status publish(const std::string& k, const std::string& v) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kv_.emplace(k, v).second) return accrun::invalid_usage("key '" + k + "' exists");
    return Status::ok();
  }
  Result<std::string> lookup(const std::string& k, int) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(k);
    if (it == kv_.end()) return Status(Code::kNotFound, "no key '" + k + "'");
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

class LatePeers final : public ac::PeerMonitor {
 public:
  explicit LatePeers(std::chrono::milliseconds after) : dies_at_(Clock::now() + after) {}
  std::optional<std::string> failure(int job_rank) const override {
    if (job_rank == 1 && Clock::now() >= dies_at_) return std::string("rank 1 on host far exited with status 9");
    return std::nullopt;
  }

 private:
  Clock::time_point dies_at_;
};

// A group of `size` members, this process group rank 0; the others are on
// other hosts (no GPU check) and never take part: the fake needs no peers.
ac::GroupContext context(int size, MapRendezvous* rv, const ac::PeerMonitor* peers = nullptr) {
  ac::GroupContext ctx;
  ctx.name = "fake";
  ctx.epoch = 1;
  ctx.rank = 0;
  ctx.size = size;
  ctx.members.resize(static_cast<std::size_t>(size));
  for (int g = 0; g < size; ++g) {
    ctx.members[static_cast<std::size_t>(g)].job_rank = g;
    ctx.members[static_cast<std::size_t>(g)].host = "h" + std::to_string(g);
  }
  ctx.timeout_ms = 5000;
  ctx.rendezvous = rv;
  ctx.peers = peers;
  return ctx;
}

std::unique_ptr<ac::Backend> make(const ac::GroupContext& ctx) {
  auto b = ac::make_nccl_backend(ctx);
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  return b.is_ok() ? std::move(b).value() : nullptr;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class NcclFake : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kLoaded) GTEST_SKIP() << "the fake CUDA runtime did not load: " << dlerror();
    std::string why;
    ASSERT_TRUE(ac::nccl_loadable(&why)) << why;
    dev_ = fakes().device(1024);
    ASSERT_NE(dev_, nullptr);
  }
  void TearDown() override {
    if (dev_ != nullptr) fakes().free_(dev_);
    fake_mode("complete");
  }
  // A one-member group whose NCCL completes its first call and no later
  // one, with a timeout of 300 ms.
  std::unique_ptr<ac::Backend> stuck_after_one(MapRendezvous* rv) {
    fake_mode("stuck", 1);
    auto b = make(context(1, rv));
    if (b != nullptr) b->set_timeout(300);
    return b;
  }
  float* dev_ = nullptr;
};

TEST_F(NcclFake, MemoryKindFollowsTheRuntime) {
  std::vector<float> host(16);
  EXPECT_EQ(ac::memory_kind(dev_), ac::MemoryKind::kDevice);
  EXPECT_EQ(ac::memory_kind(dev_ + 100), ac::MemoryKind::kDevice) << "inside a block";
  EXPECT_EQ(ac::memory_kind(host.data()), ac::MemoryKind::kHost);
  EXPECT_EQ(ac::memory_kind(nullptr), ac::MemoryKind::kHost);
  EXPECT_EQ(ac::memory_kind(dev_), ac::MemoryKind::kDevice) << "from the cache";
}

TEST_F(NcclFake, HostPointersAreRefusedNotHandedToNccl) {
  MapRendezvous rv;
  auto b = make(context(1, &rv));
  ASSERT_NE(b, nullptr);
  std::vector<float> host(16);
  Status st = b->allreduce(host.data(), host.data(), 16, ac::DType::kFloat32, ac::Op::kSum, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("is host memory"), std::string::npos) << st.message();
  st = b->allreduce(dev_, host.data(), 16, ac::DType::kFloat32, ac::Op::kSum, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << "a host receive buffer";
  EXPECT_TRUE(b->allreduce(dev_, dev_, 16, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  EXPECT_TRUE(b->barrier().is_ok());
}

TEST_F(NcclFake, TheOldestStuckOperationTimesOutThoughNewOnesKeepComing) {
  MapRendezvous rv;
  auto b = stuck_after_one(&rv);
  ASSERT_NE(b, nullptr);
  const auto t0 = Clock::now();
  Status st;
  while (st.is_ok() && seconds_since(t0) < 5) {
    st = b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(st.code(), Code::kTimeout) << st.message();
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_NE(st.message().find("did not complete within"), std::string::npos) << st.message();
  EXPECT_EQ(b->barrier().code(), Code::kTimeout) << "every later call returns the group's error";
}

// Calls queued back to back share one tracked entry (one event recorded
// again after each): the entry finishes only when its last call does, so a
// stuck call behind a finished one still times out, and says how many
// calls its entry covers.
TEST_F(NcclFake, AStuckCallAmongCallsQueuedBackToBackTimesOut) {
  MapRendezvous rv;
  auto b = stuck_after_one(&rv);
  ASSERT_NE(b, nullptr);
  const auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok()) << i;
  }
  const double queued_s = seconds_since(t0);
  Status st = b->barrier();
  EXPECT_EQ(st.code(), Code::kTimeout) << st.message();
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_NE(st.message().find("ncclAllReduce, queued"), std::string::npos) << st.message();
  if (queued_s < 0.0005) {  // all 20 and the barrier's own within the 1 ms one entry covers
    EXPECT_NE(st.message().find("or one of the 20 calls queued on its stream within 1 ms after it"),
              std::string::npos)
        << st.message();
  }
}

TEST_F(NcclFake, AnOperationStillBeingQueuedTimesOut) {
  fake_mode("inprogress");
  MapRendezvous rv;
  auto b = make(context(1, &rv));
  ASSERT_NE(b, nullptr);
  b->set_timeout(200);
  const auto t0 = Clock::now();
  Status st = b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr);
  EXPECT_EQ(st.code(), Code::kTimeout) << st.message();
  EXPECT_NE(st.message().find("still being queued"), std::string::npos) << st.message();
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST_F(NcclFake, APeerThatFailsWhileNcclIsQueueingEndsTheCall) {
  fake_mode("inprogress");
  MapRendezvous rv;
  LatePeers peers(std::chrono::milliseconds(200));
  auto b = make(context(2, &rv, &peers));
  ASSERT_NE(b, nullptr);
  b->set_timeout(-1);  // no timeout: only the peer's failure can end it
  const auto t0 = Clock::now();
  Status st = b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr);
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("group rank 1 (job rank 1 on host h1) failed"), std::string::npos) << st.message();
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST_F(NcclFake, AFailureInsideABracketIsReportedAtItsEnd) {
  fake_mode("async", 1, 100);
  MapRendezvous rv;
  auto b = make(context(1, &rv));
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  ASSERT_TRUE(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  ASSERT_TRUE(b->group_start().is_ok());
  ASSERT_TRUE(b->send(dev_, 8, ac::DType::kFloat32, 0, nullptr).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the watchdog sees the failure
  // Calls inside the bracket now return it; NCCL's group is still open.
  EXPECT_EQ(b->recv(dev_ + 8, 8, ac::DType::kFloat32, 0, nullptr).code(), Code::kRemote);
  Status st = b->group_end();  // the fake aborts the process on a call on an aborted communicator
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("reported at its end"), std::string::npos) << st.message();
  EXPECT_EQ(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).code(), Code::kRemote);
}

TEST_F(NcclFake, AnotherMembersAbortReachesThisOne) {
  MapRendezvous rv;
  auto b = make(context(2, &rv));
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  ASSERT_TRUE(rv.publish("nccl.abort", "group rank 1 (job rank 1 on host h1): its NCCL failed").is_ok());
  const auto t0 = Clock::now();
  Status st;
  while (st.is_ok() && seconds_since(t0) < 5) {
    st = b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(st.code(), Code::kRemote) << st.message();
  EXPECT_NE(st.message().find("group rank 1 (job rank 1 on host h1): its NCCL failed"), std::string::npos)
      << st.message();
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST_F(NcclFake, AFailingMemberPublishesWhy) {
  fake_mode("remote", 0);
  MapRendezvous rv;
  auto b = make(context(2, &rv));
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  const auto t0 = Clock::now();
  Result<std::string> why = rv.lookup("nccl.abort", 0);
  while (!why.is_ok() && seconds_since(t0) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    why = rv.lookup("nccl.abort", 0);
  }
  ASSERT_TRUE(why.is_ok()) << "no abort notice published";
  EXPECT_NE(why->find("group rank 0 (job rank 0 on host h0)"), std::string::npos) << *why;
  EXPECT_NE(why->find("asynchronous error"), std::string::npos) << *why;
}

// AUTO's routing, over two recording backends.
struct Recorder final : ac::Backend {
  std::vector<std::string>* calls;
  std::string tag;
  Recorder(std::vector<std::string>* c, std::string t) : calls(c), tag(std::move(t)) {}
  ac::BackendKind kind() const override { return tag == "device" ? ac::BackendKind::kNccl : ac::BackendKind::kStore; }
  void set_timeout(int ms) override { calls->push_back(tag + " timeout " + std::to_string(ms)); }
  Status note(const char* what, void* stream) {
    calls->push_back(tag + " " + what + (stream ? " stream" : ""));
    return Status::ok();
  }
  Status allreduce(const void*, void*, std::size_t, ac::DType, ac::Op, void* s) override { return note("allreduce", s); }
  Status reduce(const void*, void*, std::size_t, ac::DType, ac::Op, int, void* s) override { return note("reduce", s); }
  Status broadcast(void*, std::size_t, ac::DType, int, void* s) override { return note("broadcast", s); }
  Status allgather(const void*, void*, std::size_t, ac::DType, void* s) override { return note("allgather", s); }
  Status reducescatter(const void*, void*, std::size_t, ac::DType, ac::Op, void* s) override {
    return note("reducescatter", s);
  }
  Status barrier() override { return note("barrier", nullptr); }
  Status send(const void*, std::size_t, ac::DType, int, void* s) override { return note("send", s); }
  Status recv(void*, std::size_t, ac::DType, int, void* s) override { return note("recv", s); }
  Status group_start() override { return note("group_start", nullptr); }
  Status group_end() override { return note("group_end", nullptr); }
};

TEST_F(NcclFake, AutoRoutesEachCallByWhereItsBuffersLive) {
  std::vector<std::string> calls;
  auto routed = ac::make_routed_backend(std::make_unique<Recorder>(&calls, "device"),
                                        std::make_unique<Recorder>(&calls, "host"), "r");
  EXPECT_EQ(routed->kind(), ac::BackendKind::kNccl);
  std::vector<float> host(64);
  void* stream = reinterpret_cast<void*>(0x1234);
  ASSERT_TRUE(routed->allreduce(host.data(), host.data(), 4, ac::DType::kFloat32, ac::Op::kSum, stream).is_ok());
  ASSERT_TRUE(routed->allreduce(dev_, dev_, 4, ac::DType::kFloat32, ac::Op::kSum, stream).is_ok());
  ASSERT_TRUE(routed->broadcast(dev_, 4, ac::DType::kFloat32, 0, nullptr).is_ok());
  ASSERT_TRUE(routed->send(host.data(), 4, ac::DType::kFloat32, 1, nullptr).is_ok());
  ASSERT_TRUE(routed->recv(dev_, 4, ac::DType::kFloat32, 1, stream).is_ok());
  ASSERT_TRUE(routed->barrier().is_ok());
  Status mixed = routed->allgather(dev_, host.data(), 4, ac::DType::kFloat32, nullptr);
  EXPECT_EQ(mixed.code(), Code::kInvalidArgument);
  EXPECT_NE(mixed.message().find("send buffer is GPU memory and the receive buffer host memory"), std::string::npos)
      << mixed.message();
  routed->set_timeout(7);
  const std::vector<std::string> want = {"host allreduce",  "device allreduce stream",
                                         "device broadcast", "host send",
                                         "device recv stream", "host barrier",
                                         "device timeout 7", "host timeout 7"};
  EXPECT_EQ(calls, want);
}

}  // namespace
