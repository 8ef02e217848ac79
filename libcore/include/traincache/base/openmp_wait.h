// How LibTorch's OpenMP threads wait for work when the user chose nothing. libgomp reads its
// settings once, as it starts, from the environment: the tools set them while they load LibTorch
// (base/module.cpp), the benchmark programs by starting themselves again (cli/openmp_wait.cpp).
//
// An idle thread spins 10,000 times (about 0.1 ms) and then sleeps. Sleeping at once cost 11-18%
// on a quiet Intel Xeon (each parallel region's threads woken through the kernel); libgomp's own
// 300,000 spins cost 2-5x beside other busy processes (the spinning threads hold the cores the
// working ones need). Measured with bench/omp-wait: docs/performance.md, "Busy machines".
#pragma once

namespace traincache {

/// The variables: either one in the environment is the user's choice, and then neither is set.
inline constexpr const char* kOmpPolicyVariable = "OMP_WAIT_POLICY";
inline constexpr const char* kOmpSpinVariable = "GOMP_SPINCOUNT";

/// Their values otherwise: passive (no endless spinning) with a bounded spin, which libgomp takes
/// over the policy's own count (0 for passive).
inline constexpr const char* kOmpPolicy = "PASSIVE";
inline constexpr const char* kOmpSpinCount = "10000";

}  // namespace traincache
