// Datatype/op kernels: names, sizes and reduce_into for every dtype × op.
//
// The loops are written so GCC vectorises them at -O2/-O3 (restrict
// pointers, no branches in the body other than selects).  Integer SUM and
// PROD wrap modulo 2^N (computed in the unsigned type, so no signed-overflow
// UB).  float16 and bfloat16 are widened to float32, combined, and rounded
// back to nearest-even; each call rounds once per element.
#include <cstdint>
#include <cstring>

#include "accrun/backend.hpp"

namespace accrun::collectives {

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSum: return "sum";
    case Op::kProd: return "prod";
    case Op::kMin: return "min";
    case Op::kMax: return "max";
  }
  return "unknown";
}

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kStore: return "store";
    case BackendKind::kMpi: return "mpi";
    case BackendKind::kNccl: return "nccl";
  }
  return "unknown";
}

namespace {

// out[i] = f(x[i], y[i]); `out` may be `x` (then it is read and written
// through one pointer, so every pointer the loop sees is restrict).
template <class T, class F>
void apply(T* out, const T* x, const T* y, std::size_t n, F f) {
  if (out == x) {
    T* __restrict a = out;
    const T* __restrict b = y;
    for (std::size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
  } else {
    T* __restrict a = out;
    const T* __restrict c = x;
    const T* __restrict b = y;
    for (std::size_t i = 0; i < n; ++i) a[i] = f(c[i], b[i]);
  }
}

template <class T, class U>
void int_kernel(Op op, T* out, const T* x, const T* y, std::size_t n) {
  switch (op) {
    case Op::kSum:
      return apply(out, x, y, n,
                   [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); });
    case Op::kProd:
      return apply(out, x, y, n,
                   [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
    case Op::kMin:
      return apply(out, x, y, n, [](T a, T b) { return b < a ? b : a; });
    case Op::kMax:
      return apply(out, x, y, n, [](T a, T b) { return b > a ? b : a; });
  }
}

template <class T>
void float_kernel(Op op, T* out, const T* x, const T* y, std::size_t n) {
  switch (op) {
    case Op::kSum:
      return apply(out, x, y, n, [](T a, T b) { return a + b; });
    case Op::kProd:
      return apply(out, x, y, n, [](T a, T b) { return a * b; });
    case Op::kMin:
      return apply(out, x, y, n, [](T a, T b) { return b < a ? b : a; });
    case Op::kMax:
      return apply(out, x, y, n, [](T a, T b) { return b > a ? b : a; });
  }
}

// bfloat16 is the top half of a float32.
inline float bf16_to_float(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float combine(Op op, float x, float y) {
  switch (op) {
    case Op::kSum: return x + y;
    case Op::kProd: return x * y;
    case Op::kMin: return y < x ? y : x;
    case Op::kMax: return y > x ? y : x;
  }
  return x;
}

// Blocks of 256 widened into float32 scratch so the float loop vectorises.
constexpr std::size_t kBlock = 256;

void half_kernel(Op op, _Float16* out, const _Float16* x, const _Float16* y, std::size_t n) {
  float fa[kBlock], fb[kBlock];
  for (std::size_t base = 0; base < n; base += kBlock) {
    const std::size_t m = n - base < kBlock ? n - base : kBlock;
    for (std::size_t i = 0; i < m; ++i) fa[i] = static_cast<float>(x[base + i]);
    for (std::size_t i = 0; i < m; ++i) fb[i] = static_cast<float>(y[base + i]);
    float_kernel<float>(op, fa, fa, fb, m);
    // The conversion rounds to nearest even (IEEE default rounding).
    for (std::size_t i = 0; i < m; ++i) out[base + i] = static_cast<_Float16>(fa[i]);
  }
}

void bf16_kernel(Op op, std::uint16_t* out, const std::uint16_t* x, const std::uint16_t* y,
                 std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = float_to_bf16(combine(op, bf16_to_float(x[i]), bf16_to_float(y[i])));
}

}  // namespace

void reduce_into(DType dt, Op op, void* inout, const void* in, std::size_t count) {
  reduce_pair(dt, op, inout, inout, in, count);
}

void reduce_pair(DType dt, Op op, void* out, const void* x, const void* y, std::size_t count) {
  switch (dt) {
    case DType::kInt8:
      return int_kernel<std::int8_t, std::uint8_t>(op, static_cast<std::int8_t*>(out),
                                                   static_cast<const std::int8_t*>(x),
                                                   static_cast<const std::int8_t*>(y), count);
    case DType::kUInt8:
      return int_kernel<std::uint8_t, unsigned>(op, static_cast<std::uint8_t*>(out),
                                                static_cast<const std::uint8_t*>(x),
                                                static_cast<const std::uint8_t*>(y), count);
    case DType::kInt32:
      return int_kernel<std::int32_t, std::uint32_t>(op, static_cast<std::int32_t*>(out),
                                                     static_cast<const std::int32_t*>(x),
                                                     static_cast<const std::int32_t*>(y), count);
    case DType::kInt64:
      return int_kernel<std::int64_t, std::uint64_t>(op, static_cast<std::int64_t*>(out),
                                                     static_cast<const std::int64_t*>(x),
                                                     static_cast<const std::int64_t*>(y), count);
    case DType::kFloat16:
      return half_kernel(op, static_cast<_Float16*>(out), static_cast<const _Float16*>(x),
                         static_cast<const _Float16*>(y), count);
    case DType::kBFloat16:
      return bf16_kernel(op, static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(x),
                         static_cast<const std::uint16_t*>(y), count);
    case DType::kFloat32:
      return float_kernel<float>(op, static_cast<float*>(out), static_cast<const float*>(x),
                                 static_cast<const float*>(y), count);
    case DType::kFloat64:
      return float_kernel<double>(op, static_cast<double*>(out), static_cast<const double*>(x),
                                  static_cast<const double*>(y), count);
  }
}

}  // namespace accrun::collectives
