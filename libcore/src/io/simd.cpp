// Which vector width the image code's lane-count passes run (simd_clones.h), and the environment's
// cap on it.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "simd_clones.h"
#include "traincache/base/error.h"
#include "traincache/io/image.h"

namespace traincache::io {

namespace {

constexpr const char* kMaxIsaVariable = "TRAINCACHE_MAX_CPU_ISA";

int cpu_lanes() {
  int found = 4;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  found = avx512 ? 16 : avx2 ? 8 : 4;
#endif
  return found;
}

// The lanes TRAINCACHE_MAX_CPU_ISA allows: 0 when it is unset or empty, -1 when it names no set.
int cap_lanes(const char* value) {
  if (!value || !*value) return 0;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "avx512" ? 16 : v == "avx2" ? 8 : v == "sse2" ? 4 : -1;
}

std::string lanes_text(int lanes) {
#if defined(__x86_64__)
  const char* name = lanes == 16 ? "AVX-512" : lanes == 8 ? "AVX2" : "SSE2";
#else
  const char* name = "128-bit vectors";
#endif
  return std::string(name) + " (" + std::to_string(lanes) + " lanes)";
}

}  // namespace

int simd_lanes() {
  static const int lanes = [] {
    const int cap = cap_lanes(std::getenv(kMaxIsaVariable));
    return cap > 0 ? std::min(cpu_lanes(), cap) : cpu_lanes();
  }();
  return lanes;
}

namespace image {

std::string simd_text() {
  const int lanes = simd_lanes(), cpu = cpu_lanes();
  if (lanes == cpu) return lanes_text(lanes);
  return lanes_text(lanes) + "; held there by " + kMaxIsaVariable + "=" + std::getenv(kMaxIsaVariable) +
         ", the CPU has " + lanes_text(cpu);
}

void check_max_cpu_isa() {
  const char* value = std::getenv(kMaxIsaVariable);
  if (cap_lanes(value) < 0)
    throw Error(Exit::usage, kMaxIsaVariable, std::string("must be avx512, avx2 or sse2, got '") + value + "'");
}

}  // namespace image

}  // namespace traincache::io
