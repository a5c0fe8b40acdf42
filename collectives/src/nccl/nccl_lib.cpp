// Loading NCCL and the CUDA runtime (nccl_lib.hpp), and the questions the
// rest of libaccrun asks of them: whether they load, and where a buffer
// lives.
#include "nccl_lib.hpp"

#include <dlfcn.h>

#include <cstdint>

#include "accrun/backend.hpp"

namespace accrun::collectives {

#if ACCRUN_HAVE_NCCL
namespace nccl {
namespace {

struct Loaded {
  std::unique_ptr<Lib> lib;  // null when unavailable
  std::string why;           // why it is unavailable
};

template <class F>
void resolve(void* handle, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
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
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    out.why = std::string("libnccl.so.2 does not load (") + (e ? e : "unknown") + ")";
    return out;
  }
  auto l = std::make_unique<Lib>();
  std::string missing;
  resolve(cudart, "cudaGetDeviceCount", &l->cudaGetDeviceCount, &missing);
  resolve(cudart, "cudaGetDevice", &l->cudaGetDevice, &missing);
  resolve(cudart, "cudaSetDevice", &l->cudaSetDevice, &missing);
  resolve(cudart, "cudaDeviceGetPCIBusId", &l->cudaDeviceGetPCIBusId, &missing);
  resolve(cudart, "cudaGetErrorString", &l->cudaGetErrorString, &missing);
  resolve(cudart, "cudaGetLastError", &l->cudaGetLastError, &missing);
  resolve(cudart, "cudaStreamCreateWithFlags", &l->cudaStreamCreateWithFlags, &missing);
  resolve(cudart, "cudaStreamDestroy", &l->cudaStreamDestroy, &missing);
  resolve(cudart, "cudaEventCreateWithFlags", &l->cudaEventCreateWithFlags, &missing);
  resolve(cudart, "cudaEventRecord", &l->cudaEventRecord, &missing);
  resolve(cudart, "cudaEventQuery", &l->cudaEventQuery, &missing);
  resolve(cudart, "cudaEventDestroy", &l->cudaEventDestroy, &missing);
  resolve(cudart, "cudaPointerGetAttributes", &l->cudaPointerGetAttributes, &missing);
  resolve(cudart, "cudaMalloc", &l->cudaMalloc, &missing);
  resolve(cudart, "cudaFree", &l->cudaFree, &missing);
  if (!missing.empty()) {
    out.why = "the CUDA runtime lacks " + missing;
    return out;
  }
  resolve(handle, "ncclGetVersion", &l->ncclGetVersion, &missing);
  resolve(handle, "ncclGetUniqueId", &l->ncclGetUniqueId, &missing);
  resolve(handle, "ncclCommInitRankConfig", &l->ncclCommInitRankConfig, &missing);
  resolve(handle, "ncclCommGetAsyncError", &l->ncclCommGetAsyncError, &missing);
  resolve(handle, "ncclCommAbort", &l->ncclCommAbort, &missing);
  resolve(handle, "ncclCommFinalize", &l->ncclCommFinalize, &missing);
  resolve(handle, "ncclCommDestroy", &l->ncclCommDestroy, &missing);
  resolve(handle, "ncclGetErrorString", &l->ncclGetErrorString, &missing);
  resolve(handle, "ncclGetLastError", &l->ncclGetLastError, &missing);
  resolve(handle, "ncclAllReduce", &l->ncclAllReduce, &missing);
  resolve(handle, "ncclReduce", &l->ncclReduce, &missing);
  resolve(handle, "ncclBroadcast", &l->ncclBroadcast, &missing);
  resolve(handle, "ncclAllGather", &l->ncclAllGather, &missing);
  resolve(handle, "ncclReduceScatter", &l->ncclReduceScatter, &missing);
  resolve(handle, "ncclSend", &l->ncclSend, &missing);
  resolve(handle, "ncclRecv", &l->ncclRecv, &missing);
  resolve(handle, "ncclGroupStart", &l->ncclGroupStart, &missing);
  resolve(handle, "ncclGroupEnd", &l->ncclGroupEnd, &missing);
  if (!missing.empty()) {
    out.why = "libnccl.so.2 lacks " + missing + " (accrun needs NCCL 2.14 or later for non-blocking communicators)";
    return out;
  }
  l->ncclGetVersion(&l->nccl_version);
  // Without the driver the runtime only says its version is "insufficient";
  // name the real cause.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    out.why = "no NVIDIA driver here (libcuda.so.1 does not load), so no GPU";
    return out;
  }
  cudaError_t ce = l->cudaGetDeviceCount(&l->device_count);
  if (ce != cudaSuccess || l->device_count == 0) {
    out.why = ce != cudaSuccess
                  ? std::string("the CUDA runtime sees no GPU (cudaGetDeviceCount: ") + l->cudaGetErrorString(ce) + ")"
                  : std::string("the CUDA runtime sees no GPU (cudaGetDeviceCount: 0 devices)");
    return out;
  }
  out.lib = std::move(l);
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Lib* lib(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.lib ? std::string() : l.why;
  return l.lib.get();
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

}  // namespace nccl

bool nccl_loadable(std::string* why) { return nccl::lib(why) != nullptr; }

MemoryKind memory_kind(const void* p) {
  if (p == nullptr) return MemoryKind::kHost;
  const nccl::Lib* l = nccl::lib(nullptr);
  if (l == nullptr) return MemoryKind::kHost;
  // A pointer's kind never changes while it is allocated, and a device
  // address is never reused for host memory (one address space), so the
  // last few answers are kept per thread: a training loop asks about the
  // same few buffers on every call.
  struct Entry {
    const void* p;
    MemoryKind kind;
  };
  thread_local Entry cache[16] = {};
  thread_local unsigned next = 0;
  for (const Entry& e : cache) {
    if (e.p == p) return e.kind;
  }
  cudaPointerAttributes a{};
  MemoryKind kind = MemoryKind::kHost;
  if (l->cudaPointerGetAttributes(&a, p) == cudaSuccess) {
    if (a.type == cudaMemoryTypeDevice) kind = MemoryKind::kDevice;
    else if (a.type == cudaMemoryTypeManaged) kind = MemoryKind::kManaged;
  } else {
    l->cudaGetLastError();  // older runtimes fail on unregistered host memory: clear it
  }
  cache[next++ % 16] = {p, kind};
  return kind;
}

#else  // !ACCRUN_HAVE_NCCL

bool nccl_loadable(std::string* why) {
  if (why != nullptr) *why = "this build of accrun has no NCCL backend";
  return false;
}

MemoryKind memory_kind(const void*) { return MemoryKind::kHost; }

#endif  // ACCRUN_HAVE_NCCL

}  // namespace accrun::collectives
