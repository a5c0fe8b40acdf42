// Device buffers for -d cuda and the raw-nccl table entry: the same
// operations as plain NCCL calls on a communicator of every rank, the
// reference the NCCL backend is held to (docs/design.md §8: at most 1 µs over raw
// NCCL per call).  The CUDA runtime and NCCL are loaded with dlopen, as
// libaccrun does; their headers give the types only (ACCRUN_HAVE_NCCL).
#pragma once

#include <accrun/accrun.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <string>

#include "harness.hpp"

namespace accrun::bench {

struct Cuda {
  cudaError_t (*cudaMalloc)(void**, size_t) = nullptr;  // overloaded in C++: spelled out
  decltype(&::cudaFree) cudaFree = nullptr;
  decltype(&::cudaMemcpy) cudaMemcpy = nullptr;
  decltype(&::cudaStreamCreateWithFlags) cudaStreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamSynchronize) cudaStreamSynchronize = nullptr;
  decltype(&::cudaStreamDestroy) cudaStreamDestroy = nullptr;
  decltype(&::cudaGetErrorString) cudaGetErrorString = nullptr;

  decltype(&::ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&::ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::ncclAllReduce) ncclAllReduce = nullptr;
  decltype(&::ncclBroadcast) ncclBroadcast = nullptr;
  decltype(&::ncclAllGather) ncclAllGather = nullptr;
  decltype(&::ncclReduceScatter) ncclReduceScatter = nullptr;
  decltype(&::ncclSend) ncclSend = nullptr;
  decltype(&::ncclRecv) ncclRecv = nullptr;

  cudaStream_t stream = nullptr;  // the stream every measured operation is queued on
};

template <class F>
void resolve(void* lib, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
}

// Loads the CUDA runtime and NCCL and creates the stream; on failure says why.
inline bool load_cuda(Cuda* c, std::string* why) {
  void* rt = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"})
    if ((rt = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) != nullptr) break;
  if (rt == nullptr) {
    *why = "the CUDA runtime (libcudart.so) does not load";
    return false;
  }
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (nccl == nullptr) {
    *why = "libnccl.so.2 does not load";
    return false;
  }
  // Without the driver the runtime only says its version is "insufficient".
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    *why = "no NVIDIA driver here (libcuda.so.1 does not load), so no GPU";
    return false;
  }
  std::string missing;
  resolve(rt, "cudaMalloc", &c->cudaMalloc, &missing);
  resolve(rt, "cudaFree", &c->cudaFree, &missing);
  resolve(rt, "cudaMemcpy", &c->cudaMemcpy, &missing);
  resolve(rt, "cudaStreamCreateWithFlags", &c->cudaStreamCreateWithFlags, &missing);
  resolve(rt, "cudaStreamSynchronize", &c->cudaStreamSynchronize, &missing);
  resolve(rt, "cudaStreamDestroy", &c->cudaStreamDestroy, &missing);
  resolve(rt, "cudaGetErrorString", &c->cudaGetErrorString, &missing);
  resolve(nccl, "ncclGetUniqueId", &c->ncclGetUniqueId, &missing);
  resolve(nccl, "ncclCommInitRank", &c->ncclCommInitRank, &missing);
  resolve(nccl, "ncclCommDestroy", &c->ncclCommDestroy, &missing);
  resolve(nccl, "ncclGetErrorString", &c->ncclGetErrorString, &missing);
  resolve(nccl, "ncclAllReduce", &c->ncclAllReduce, &missing);
  resolve(nccl, "ncclBroadcast", &c->ncclBroadcast, &missing);
  resolve(nccl, "ncclAllGather", &c->ncclAllGather, &missing);
  resolve(nccl, "ncclReduceScatter", &c->ncclReduceScatter, &missing);
  resolve(nccl, "ncclSend", &c->ncclSend, &missing);
  resolve(nccl, "ncclRecv", &c->ncclRecv, &missing);
  if (!missing.empty()) {
    *why = "the CUDA runtime or NCCL lacks " + missing;
    return false;
  }
  cudaError_t e = c->cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    *why = std::string("cudaStreamCreateWithFlags: ") + c->cudaGetErrorString(e);
    return false;
  }
  return true;
}

inline Memory device_memory(const Cuda& c) {
  Memory m;
  m.alloc = [&c](std::size_t bytes) -> void* {
    void* p = nullptr;
    return c.cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  };
  m.release = [&c](void* p) { (void)c.cudaFree(p); };
  m.upload = [&c](void* dst, const void* src, std::size_t bytes) {
    return c.cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 1;
  };
  return m;
}

inline int cuda_check(const Cuda& c, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  std::fprintf(stderr, "osu: %s: %s\n", what, c.cudaGetErrorString(e));
  return 1;
}

inline int nccl_check(const Cuda& c, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return 0;
  std::fprintf(stderr, "osu: %s: %s\n", what, c.ncclGetErrorString(r));
  return 1;
}

// A communicator of every rank; the unique id travels through the job's
// object store (accrun_put on rank 0, accrun_get with a wait elsewhere).
inline ncclComm_t raw_nccl_comm(const Cuda& c, int rank, int size) {
  ncclUniqueId id{};
  const char* key = "osu.raw-nccl.id";
  if (rank == 0) {
    if (nccl_check(c, c.ncclGetUniqueId(&id), "ncclGetUniqueId") != 0) return nullptr;
    if (accrun_put(key, &id, sizeof id) != ACCRUN_SUCCESS) {
      std::fprintf(stderr, "osu: accrun_put: %s\n", accrun_last_error());
      return nullptr;
    }
  } else {
    std::size_t len = 0;
    if (accrun_get(key, &id, sizeof id, &len, 60000) != ACCRUN_SUCCESS || len != sizeof id) {
      std::fprintf(stderr, "osu: the NCCL unique id did not arrive: %s\n", accrun_last_error());
      return nullptr;
    }
  }
  ncclComm_t comm = nullptr;
  if (nccl_check(c, c.ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank") != 0) return nullptr;
  return comm;
}

inline Impl make_raw_nccl_impl(const Cuda& c, ncclComm_t comm, void* scratch) {
  Impl im;
  im.name = "raw-nccl";
  cudaStream_t s = c.stream;
  im.allreduce = [&c, comm, s](const void* in, void* out, std::size_t bytes) {
    return nccl_check(c, c.ncclAllReduce(in, out, bytes / 4, ncclFloat32, ncclSum, comm, s), "ncclAllReduce");
  };
  im.bcast = [&c, comm, s](void* buf, std::size_t bytes, int root) {
    return nccl_check(c, c.ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm, s), "ncclBroadcast");
  };
  im.allgather = [&c, comm, s](const void* in, void* out, std::size_t bytes) {
    return nccl_check(c, c.ncclAllGather(in, out, bytes, ncclUint8, comm, s), "ncclAllGather");
  };
  im.reduce_scatter = [&c, comm, s](const void* in, void* out, std::size_t recv_bytes) {
    return nccl_check(c, c.ncclReduceScatter(in, out, recv_bytes / 4, ncclFloat32, ncclSum, comm, s),
                      "ncclReduceScatter");
  };
  // NCCL has no barrier: a one-element allreduce, waited for.
  im.barrier = [&c, comm, s, scratch] {
    if (nccl_check(c, c.ncclAllReduce(scratch, scratch, 1, ncclInt32, ncclSum, comm, s), "ncclAllReduce") != 0)
      return 1;
    return cuda_check(c, c.cudaStreamSynchronize(s), "cudaStreamSynchronize");
  };
  im.send = [&c, comm, s](const void* buf, std::size_t bytes, int peer) {
    return nccl_check(c, c.ncclSend(buf, bytes, ncclUint8, peer, comm, s), "ncclSend");
  };
  im.recv = [&c, comm, s](void* buf, std::size_t bytes, int peer) {
    return nccl_check(c, c.ncclRecv(buf, bytes, ncclUint8, peer, comm, s), "ncclRecv");
  };
  im.wait = [&c, s] { return cuda_check(c, c.cudaStreamSynchronize(s), "cudaStreamSynchronize"); };
  return im;
}

}  // namespace accrun::bench
