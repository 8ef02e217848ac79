// A seeded random generator whose sequence is the same on every platform and standard library
// (splitmix64), for splits and bootstrap resamples that a seed reproduces anywhere.
#pragma once

#include <cstdint>

namespace traincache {

struct SplitMix {
  uint64_t state = 0;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n), n > 0, without modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t x = next();
      if (x < limit) return x % n;
    }
  }
};

}  // namespace traincache
