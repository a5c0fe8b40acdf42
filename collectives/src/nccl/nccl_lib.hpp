// NCCL and the CUDA runtime, loaded with dlopen on first use and never
// linked, so libaccrun builds and runs where CUDA is absent and can say why
// NCCL is unavailable.  The headers give the types only (ACCRUN_HAVE_NCCL).
#pragma once

#include "accrun/config.h"

#if ACCRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "accrun/backend.hpp"

namespace accrun::collectives::nccl {

// The entry points used, resolved from the loaded libraries.
struct Lib {
  decltype(&::cudaGetDeviceCount) cudaGetDeviceCount = nullptr;
  decltype(&::cudaGetDevice) cudaGetDevice = nullptr;
  decltype(&::cudaSetDevice) cudaSetDevice = nullptr;
  decltype(&::cudaDeviceGetPCIBusId) cudaDeviceGetPCIBusId = nullptr;
  decltype(&::cudaGetErrorString) cudaGetErrorString = nullptr;
  decltype(&::cudaGetLastError) cudaGetLastError = nullptr;
  decltype(&::cudaStreamCreateWithFlags) cudaStreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamDestroy) cudaStreamDestroy = nullptr;
  decltype(&::cudaEventCreateWithFlags) cudaEventCreateWithFlags = nullptr;
  decltype(&::cudaEventRecord) cudaEventRecord = nullptr;
  decltype(&::cudaEventQuery) cudaEventQuery = nullptr;
  decltype(&::cudaEventDestroy) cudaEventDestroy = nullptr;
  decltype(&::cudaPointerGetAttributes) cudaPointerGetAttributes = nullptr;
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

// The libraries, loaded once per process and kept (CUDA libraries are not
// safe to unload while a context may exist); null with the reason in *why
// when they do not load or see no GPU.  Thread-safe.
const Lib* lib(std::string* why);

ncclDataType_t to_nccl(DType dt);
ncclRedOp_t to_nccl(Op op);

// The NCCL unique id in the group's directory: lower-case hex.
std::string to_hex(const void* p, std::size_t n);
bool from_hex(const std::string& s, void* p, std::size_t n);

// Makes the group's device current for the life of the guard and restores
// the caller's afterwards, so work is queued and recorded on the group's
// device whatever device the calling thread has current.
class DeviceGuard {
 public:
  DeviceGuard(const Lib& lib, int device) : lib_(lib) {
    if (lib_.cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = lib_.cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) lib_.cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const Lib& lib_;
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace accrun::collectives::nccl
#endif  // ACCRUN_HAVE_NCCL
