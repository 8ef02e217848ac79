// int8-peak: how fast this CPU multiplies and adds, register to register, in the instructions
// the text encoders' linear layers run on: float32 FMA (what a float32 pipeline's products are
// bound by), the exact int8 product without VNNI (vpmaddubsw, vpmaddwd by ones, vpaddd: what
// fbgemm runs on AVX2, and int8 there is bound by) and VNNI's vpdpbusd. One JSON object on stdout:
// multiply-adds per second per core, with THREADS cores at work at once. make bench's
// text_precision entry turns them into each path's floor for its texts (docs/performance.md).
//   int8-peak [--threads N]
// Exit 0, 64 usage, 70 when a kernel's sum is not the one its products give (a miscompiled loop).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/cli/cli.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int kChains = 12;       // independent accumulators: the loop runs at the units' rate
constexpr long kIters = 1000000;  // per call: each float32 lane's sum stays exact (6e6 < 2^24)
constexpr int kCalls = 20;        // per round and core: 30-80 ms on a 3-4 GHz core

// Each kernel adds kIters x kChains steps of products of 3 by 2 and returns the sum of every
// lane: 6 x kIters x kChains x the step's multiply-adds, which measure() checks (and which keeps
// every chain's work live).
#if defined(__x86_64__)
// Every lane of every chain, summed in double (a float32 lane's own sum is exact); copied out, not
// added by _mm512_reduce_add_*, inside which GCC 12 warns (-Wuninitialized).
template <class T, int N, class V>
double sum_chains(const V (&acc)[kChains]) {
  static_assert(sizeof(T) * N == sizeof(V), "a vector's lanes");
  double sum = 0;
  for (const V& v : acc) {
    T lanes[N];
    std::memcpy(lanes, &v, sizeof v);
    for (T l : lanes) sum += static_cast<double>(l);
  }
  return sum;
}

// One kernel: NAME, built for TARGET, chains of vector type V (N lanes of type LANE), `a` set to
// 3 and `b` to 2 by SET, the chains zeroed by ZERO, then kIters x kChains steps `c = STEP`. The
// empty asm (REG: the register class of V) says `a` changed, so that every step's product is
// computed, not one hoisted out of the loop.
#define TC_PEAK_KERNEL(NAME, TARGET, V, LANE, N, REG, SET, ZERO, STEP) \
  __attribute__((target(TARGET), noinline)) double NAME(long iters) {  \
    V a = SET(3), acc[kChains];                                        \
    const V b = SET(2);                                                \
    for (auto& c : acc) c = ZERO();                                    \
    for (long it = 0; it < iters; ++it) {                              \
      _Pragma("GCC unroll 12") for (auto& c : acc) {                   \
        __asm__ volatile("" : "+" REG(a));                             \
        c = STEP;                                                      \
      }                                                                \
    }                                                                  \
    return sum_chains<LANE, N>(acc);                                   \
  }

TC_PEAK_KERNEL(fp32_fma_avx2, "avx2,fma", __m256, float, 8, "x", _mm256_set1_ps, _mm256_setzero_ps,
               _mm256_fmadd_ps(a, b, c))
TC_PEAK_KERNEL(fp32_fma_avx512, "avx512f", __m512, float, 16, "v", _mm512_set1_ps, _mm512_setzero_ps,
               _mm512_fmadd_ps(a, b, c))
TC_PEAK_KERNEL(int8_exact_avx2, "avx2", __m256i, int32_t, 8, "x", _mm256_set1_epi8, _mm256_setzero_si256,
               _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))))
TC_PEAK_KERNEL(int8_vnni, "avx512f,avx512bw,avx512vnni", __m512i, int32_t, 16, "v", _mm512_set1_epi8,
               _mm512_setzero_si512, _mm512_dpbusd_epi32(c, a, b))
#endif

struct Kernel {
  const char* name;
  double (*run)(long);
  int macs_per_step;  // multiply-adds of one chain's step (one instruction's lanes)
  bool available;
};

std::vector<Kernel> kernels() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2"), fma = avx2 && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return {{"fp32_fma_avx2", fp32_fma_avx2, 8, fma},
          {"fp32_fma_avx512", fp32_fma_avx512, 16, avx512},
          {"int8_exact_avx2", int8_exact_avx2, 32, avx2},
          {"int8_vnni", int8_vnni, 64, vnni}};
#else
  return {};
#endif
}

// Multiply-adds per second per core of k, `threads` copies at once, best of five rounds; throws
// when a call's sum is not its products'.
double measure(const Kernel& k, int threads) {
  k.run(1000);  // warm: the units' clocks and the page of code
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> wrong{false};
    std::vector<std::thread> team;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      team.emplace_back([&] {
        for (int c = 0; c < kCalls; ++c)
          if (k.run(kIters) != 6.0 * k.macs_per_step * kIters * kChains) wrong = true;
      });
    for (auto& t : team) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wrong) throw traincache::Error(traincache::Exit::internal, k.name, "its sum is not its products'");
    best = std::max(best, static_cast<double>(kIters) * kCalls * kChains * k.macs_per_step / s);
  }
  return best;
}

int run(int threads) {
  nlohmann::ordered_json per_core;
  for (const Kernel& k : kernels())
    per_core[k.name] = k.available ? nlohmann::json(measure(k, threads) / 1e9) : nullptr;
  nlohmann::ordered_json j{{"threads", threads}, {"gmacs_per_core", per_core}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"int8-peak: multiply-adds per second per core in float32 FMA and int8 products (JSON)"};
  int threads = 1;
  app.add_option("--threads", threads, "cores at work at once (each a copy of each kernel)")
      ->check(traincache::cli::positive_integer());
  return traincache::cli::end_process(
      traincache::cli::run_tool("int8-peak", app, argc, argv, [&] { return run(threads); }));
}
