// reduce_into and reduce_pair for every dtype × op, names and sizes,
// float16/bfloat16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "accrun/backend.hpp"

namespace accrun::collectives {
namespace {

template <class T>
std::vector<T> reduce(Op op, DType dt, std::vector<T> a, const std::vector<T>& b) {
  reduce_into(dt, op, a.data(), b.data(), a.size());
  return a;
}

TEST(Kernels, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(op_name(Op::kProd), "prod");
  EXPECT_STREQ(backend_name(BackendKind::kStore), "store");
}

TEST(Kernels, IntegersEveryOpAndWrap) {
  // Long enough to run through the vectorised body and a tail.
  std::vector<std::int32_t> a(1003), b(1003);
  for (int i = 0; i < 1003; ++i) { a[i] = i - 500; b[i] = 3 - (i % 7); }
  auto s = reduce(Op::kSum, DType::kInt32, a, b), p = reduce(Op::kProd, DType::kInt32, a, b);
  auto mn = reduce(Op::kMin, DType::kInt32, a, b), mx = reduce(Op::kMax, DType::kInt32, a, b);
  for (int i = 0; i < 1003; ++i) {
    EXPECT_EQ(s[i], a[i] + b[i]);
    EXPECT_EQ(p[i], a[i] * b[i]);
    EXPECT_EQ(mn[i], std::min(a[i], b[i]));
    EXPECT_EQ(mx[i], std::max(a[i], b[i]));
  }
  EXPECT_EQ(reduce(Op::kSum, DType::kInt8, std::vector<std::int8_t>{127}, {1})[0], -128);
  EXPECT_EQ(reduce(Op::kProd, DType::kUInt8, std::vector<std::uint8_t>{16}, {16})[0], 0);
  EXPECT_EQ(reduce(Op::kMin, DType::kUInt8, std::vector<std::uint8_t>{200}, {3})[0], 3);
  EXPECT_EQ(reduce(Op::kMax, DType::kInt8, std::vector<std::int8_t>{-100}, {-3})[0], -3);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(reduce(Op::kSum, DType::kInt64, std::vector<std::int64_t>{big}, {1})[0], std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(reduce(Op::kProd, DType::kInt64, std::vector<std::int64_t>{1ll << 40}, {-3})[0], -(3ll << 40));
}

TEST(Kernels, FloatsEveryOp) {
  std::vector<double> a{1.5, -2, 0.25, 1e300}, b{2, 3, -0.5, 1e300};
  EXPECT_EQ(reduce(Op::kSum, DType::kFloat64, a, b), (std::vector<double>{3.5, 1, -0.25, 2e300}));
  EXPECT_EQ(reduce(Op::kProd, DType::kFloat64, a, b)[2], -0.125);
  EXPECT_TRUE(std::isinf(reduce(Op::kProd, DType::kFloat64, a, b)[3]));
  std::vector<float> fa{1, -7, 3}, fb{2, -8, 3};
  EXPECT_EQ(reduce(Op::kMin, DType::kFloat32, fa, fb), (std::vector<float>{1, -8, 3}));
  EXPECT_EQ(reduce(Op::kMax, DType::kFloat32, fa, fb), (std::vector<float>{2, -7, 3}));
}

std::uint16_t bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Kernels, BFloat16ReducedInFloat32RoundToNearestEven) {
  // 256 + 1 = 257 is a tie between 256 and 258 in bfloat16 (8-bit
  // significand): nearest even keeps 256.  256 + 3 = 259 rounds up to 260.
  std::vector<std::uint16_t> a{bf16(256), bf16(256), bf16(3), bf16(-2), bf16(1.5f)};
  std::vector<std::uint16_t> b{bf16(1), bf16(3), bf16(4), bf16(5), bf16(-4)};
  auto s = reduce(Op::kSum, DType::kBFloat16, a, b);
  EXPECT_EQ(from_bf16(s[0]), 256.0f);
  EXPECT_EQ(from_bf16(s[1]), 260.0f);
  EXPECT_EQ(from_bf16(s[2]), 7.0f);
  EXPECT_EQ(from_bf16(s[3]), 3.0f);
  EXPECT_EQ(from_bf16(s[4]), -2.5f);
  auto p = reduce(Op::kProd, DType::kBFloat16, a, b);
  EXPECT_EQ(from_bf16(p[2]), 12.0f);
  EXPECT_EQ(from_bf16(p[4]), -6.0f);
  auto mn = reduce(Op::kMin, DType::kBFloat16, a, b), mx = reduce(Op::kMax, DType::kBFloat16, a, b);
  EXPECT_EQ(from_bf16(mn[3]), -2.0f);
  EXPECT_EQ(from_bf16(mx[3]), 5.0f);
}

TEST(Kernels, Float16ReducedInFloat32RoundToNearestEven) {
  // float16 has an 11-bit significand: 2048 + 1 ties to 2048, 2048 + 3 → 2052.
  std::vector<_Float16> a(600, static_cast<_Float16>(2048)), b(600, static_cast<_Float16>(1));
  b[1] = static_cast<_Float16>(3);
  b[599] = static_cast<_Float16>(-0.5f);
  auto s = reduce(Op::kSum, DType::kFloat16, a, b);
  EXPECT_EQ(static_cast<float>(s[0]), 2048.0f);
  EXPECT_EQ(static_cast<float>(s[1]), 2052.0f);
  EXPECT_EQ(static_cast<float>(s[599]), 2048.0f);  // 2047.5 ties to even 2048
  std::vector<_Float16> x{static_cast<_Float16>(0.5f), static_cast<_Float16>(-3)};
  std::vector<_Float16> y{static_cast<_Float16>(0.25f), static_cast<_Float16>(2)};
  auto p = reduce(Op::kProd, DType::kFloat16, x, y);
  EXPECT_EQ(static_cast<float>(p[0]), 0.125f);
  EXPECT_EQ(static_cast<float>(p[1]), -6.0f);
  EXPECT_EQ(static_cast<float>(reduce(Op::kMin, DType::kFloat16, x, y)[1]), -3.0f);
  EXPECT_EQ(static_cast<float>(reduce(Op::kMax, DType::kFloat16, x, y)[0]), 0.5f);
}

TEST(Kernels, PairPutsTheResultElsewhere) {
  // reduce_pair(out, x, y) is reduce_into(x, y) with the result in out, x
  // and y left as they were (reduce_into is reduce_pair with out == x, the
  // other loop of each kernel, checked against known values above).  Every
  // dtype and op, over bytes of every pattern, long enough for the
  // vectorised body and a tail.
  constexpr std::size_t kCount = 1003;
  std::vector<unsigned char> x(kCount * 8), y(kCount * 8);
  std::uint32_t seed = 12345;
  for (auto* v : {&x, &y})
    for (unsigned char& c : *v)
      c = static_cast<unsigned char>((seed = seed * 1103515245u + 12345u) >> 16);
  for (DType dt : {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64, DType::kFloat16,
                   DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (Op op : {Op::kSum, Op::kProd, Op::kMin, Op::kMax}) {
      const std::size_t bytes = kCount * dtype_size(dt);
      std::vector<unsigned char> want(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(bytes));
      reduce_into(dt, op, want.data(), y.data(), kCount);
      std::vector<unsigned char> out(bytes, 0xA5), xs = x, ys = y;
      reduce_pair(dt, op, out.data(), xs.data(), ys.data(), kCount);
      EXPECT_EQ(out, want) << dtype_name(dt) << " " << op_name(op);
      EXPECT_EQ(xs, x) << dtype_name(dt) << " " << op_name(op) << ": x was written";
      EXPECT_EQ(ys, y) << dtype_name(dt) << " " << op_name(op) << ": y was written";
    }
  }
}

}  // namespace
}  // namespace accrun::collectives
