// The store's block copy (store/copy.hpp): every byte of every size and
// alignment around its thresholds lands, and nothing past the block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "store/copy.hpp"

namespace accrun::collectives::testing {
namespace {

TEST(StoreCopy, EveryByteOfEverySizeAndAlignmentAndNothingBeyond) {
  using store::copy_block;
  using store::kVectorCopyMin;
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 300; ++n) sizes.push_back(n);
  for (std::size_t base : {kVectorCopyMin, std::size_t{65536}, std::size_t{1} << 20})
    for (std::size_t d : {0, 1, 15, 16, 63, 64, 127, 129})
      for (std::size_t n : {base - d, base + d}) sizes.push_back(n);
  constexpr std::size_t kGuard = 64;
  const std::size_t cap = (std::size_t{1} << 20) + 256 + 2 * kGuard;
  std::vector<unsigned char> src(cap), dst(cap);
  for (std::size_t i = 0; i < cap; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (std::size_t n : sizes) {
    for (std::size_t so : {0, 1, 16, 33}) {
      for (std::size_t dof : {0, 7, 32}) {
        std::fill(dst.begin(), dst.end(), 0xA5);
        copy_block(dst.data() + kGuard + dof, src.data() + so, n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(dst[kGuard + dof + i], src[so + i])
              << "n " << n << " src+" << so << " dst+" << dof << " at " << i;
        for (std::size_t i = 0; i < kGuard + dof; ++i)
          ASSERT_EQ(dst[i], 0xA5) << "n " << n << ": written before, at " << i;
        for (std::size_t i = kGuard + dof + n; i < kGuard + dof + n + kGuard; ++i)
          ASSERT_EQ(dst[i], 0xA5) << "n " << n << ": written past the block, at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace accrun::collectives::testing
