// The NCCL backend: how it reports being unavailable (no GPU, no NCCL), and
// a world-size-1 run over device buffers where a GPU is present.  NCCL
// refuses two ranks on one GPU, so multi-rank correctness needs two GPUs and
// is not run here.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "accrun/config.h"

namespace ac = accrun::collectives;
using accrun::Code;

namespace {

ac::GroupContext solo(const std::string& name) {
  ac::GroupContext ctx;
  ctx.name = name;
  ctx.epoch = 1;
  ctx.rank = 0;
  ctx.size = 1;
  ctx.members.resize(1);
  ctx.members[0].host = "localhost";
  ctx.timeout_ms = 20000;
  return ctx;
}

TEST(NcclBackend, UnavailableSaysWhy) {
  std::string why;
  if (ac::nccl_loadable(&why)) GTEST_SKIP() << "NCCL and a GPU are present here: see WorldSizeOne";
  EXPECT_FALSE(why.empty());
  auto b = ac::make_nccl_backend(solo("nccl-absent"));
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kNotSupported);
  EXPECT_NE(b.status().message().find("nccl-absent"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find(why), std::string::npos) << b.status().message();
}

TEST(NcclBackend, LoadabilityIsStable) {
  std::string a;
  std::string b;
  EXPECT_EQ(ac::nccl_loadable(&a), ac::nccl_loadable(&b));
  EXPECT_EQ(a, b);
  EXPECT_EQ(ac::nccl_loadable(nullptr), ac::nccl_loadable(&a));
}

// The CUDA runtime calls a test needs, loaded as the backend loads them.
struct Cuda {
  void* h = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;  // kind 1: H2D, 2: D2H
  int (*sync_)() = nullptr;
  bool load() {
    for (const char* n : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (h == nullptr) return false;
    malloc_ = reinterpret_cast<decltype(malloc_)>(dlsym(h, "cudaMalloc"));
    free_ = reinterpret_cast<decltype(free_)>(dlsym(h, "cudaFree"));
    memcpy_ = reinterpret_cast<decltype(memcpy_)>(dlsym(h, "cudaMemcpy"));
    sync_ = reinterpret_cast<decltype(sync_)>(dlsym(h, "cudaDeviceSynchronize"));
    return malloc_ && free_ && memcpy_ && sync_;
  }
};

TEST(NcclBackend, WorldSizeOne) {
  std::string why;
  if (!ac::nccl_loadable(&why)) GTEST_SKIP() << "NCCL unavailable here (no GPU run possible): " << why;
  Cuda cuda;
  ASSERT_TRUE(cuda.load());
  auto made = ac::make_nccl_backend(solo("nccl-solo"));
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  ac::Backend& b = **made;
  EXPECT_EQ(b.kind(), ac::BackendKind::kNccl);

  const std::size_t n = 1 << 16;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 100);
  void* d = nullptr;
  void* e = nullptr;
  ASSERT_EQ(cuda.malloc_(&d, n * sizeof(float)), 0);
  ASSERT_EQ(cuda.malloc_(&e, n * sizeof(float)), 0);
  ASSERT_EQ(cuda.memcpy_(d, host.data(), n * sizeof(float), 1), 0);
  for (ac::Op op : {ac::Op::kSum, ac::Op::kProd, ac::Op::kMin, ac::Op::kMax}) {
    ASSERT_TRUE(b.allreduce(d, e, n, ac::DType::kFloat32, op, nullptr).is_ok());
    std::vector<float> out(n, -1);
    ASSERT_EQ(cuda.memcpy_(out.data(), e, n * sizeof(float), 2), 0);
    EXPECT_EQ(out, host) << "a one-rank reduction is the identity";
  }
  ASSERT_TRUE(b.broadcast(d, n, ac::DType::kFloat32, 0, nullptr).is_ok());
  ASSERT_TRUE(b.allgather(d, e, n, ac::DType::kFloat32, nullptr).is_ok());
  ASSERT_TRUE(b.reducescatter(d, e, n, ac::DType::kFloat32, ac::Op::kSum, nullptr).is_ok());
  ASSERT_TRUE(b.group_start().is_ok());
  ASSERT_TRUE(b.send(d, n, ac::DType::kFloat32, 0, nullptr).is_ok());
  ASSERT_TRUE(b.recv(e, n, ac::DType::kFloat32, 0, nullptr).is_ok());
  ASSERT_TRUE(b.group_end().is_ok());
  ASSERT_TRUE(b.barrier().is_ok());
  std::vector<float> out(n, -1);
  ASSERT_EQ(cuda.memcpy_(out.data(), e, n * sizeof(float), 2), 0);
  EXPECT_EQ(out, host);
  EXPECT_EQ(b.broadcast(d, n, ac::DType::kFloat32, 1, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(b.group_end().code(), Code::kInvalidUsage);
  cuda.free_(d);
  cuda.free_(e);
}

}  // namespace
