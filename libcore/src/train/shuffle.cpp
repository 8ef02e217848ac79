#include "traincache/train/shuffle.h"

#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <numeric>
#include <utility>

namespace traincache::train {

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<std::size_t>(std::max<int64_t>(0, n)));
  std::iota(p.begin(), p.end(), int64_t{0});
  at::CPUGeneratorImpl gen(seed);
  // LibTorch's CPU randperm: position i swaps with one of i..n-1 drawn from the generator's
  // 32-bit output (its 64-bit output for n too large for 32 bits to stay near uniform).
  const bool wide = n >= static_cast<int64_t>(std::numeric_limits<uint32_t>::max() / 20);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const uint64_t r = wide ? gen.random64() : gen.random();
    const auto z = static_cast<int64_t>(r % static_cast<uint64_t>(n - i));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(i + z)]);
  }
  return p;
}

}  // namespace traincache::train
