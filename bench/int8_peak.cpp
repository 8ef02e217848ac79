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

// The empty asm says `a` changed, so that every product is computed (not one, hoisted).
#define TC_FRESH(v) __asm__ volatile("" : "+x"(v))
#define TC_FRESH512(v) __asm__ volatile("" : "+v"(v))

__attribute__((target("avx2,fma"), noinline)) double fp32_fma_avx2(long iters) {
  __m256 a = _mm256_set1_ps(3.0f), b = _mm256_set1_ps(2.0f), acc[kChains];
  for (auto& c : acc) c = _mm256_setzero_ps();
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (auto& c : acc) {
      TC_FRESH(a);
      c = _mm256_fmadd_ps(a, b, c);
    }
  return sum_chains<float, 8>(acc);
}

__attribute__((target("avx512f"), noinline)) double fp32_fma_avx512(long iters) {
  __m512 a = _mm512_set1_ps(3.0f), b = _mm512_set1_ps(2.0f), acc[kChains];
  for (auto& c : acc) c = _mm512_setzero_ps();
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (auto& c : acc) {
      TC_FRESH512(a);
      c = _mm512_fmadd_ps(a, b, c);
    }
  return sum_chains<float, 16>(acc);
}

__attribute__((target("avx2"), noinline)) double int8_exact_avx2(long iters) {
  const __m256i b = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);
  __m256i a = _mm256_set1_epi8(3), acc[kChains];
  for (auto& c : acc) c = _mm256_setzero_si256();
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (auto& c : acc) {
      TC_FRESH(a);
      c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
  return sum_chains<int32_t, 8>(acc);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double int8_vnni(long iters) {
  const __m512i b = _mm512_set1_epi8(2);
  __m512i a = _mm512_set1_epi8(3), acc[kChains];
  for (auto& c : acc) c = _mm512_setzero_si512();
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (auto& c : acc) {
      TC_FRESH512(a);
      c = _mm512_dpbusd_epi32(c, a, b);
    }
  return sum_chains<int32_t, 16>(acc);
}
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
