#include "traincache/model/runtime.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <thread>

#include "traincache/base/cores.h"
#include "traincache/base/version.h"

namespace traincache {

namespace {

// "2" or, when this process may use fewer cores than the machine has, "2 of 16".
std::string cores_text() {
  const unsigned usable = usable_cores(), machine = std::max(1u, std::thread::hardware_concurrency());
  return std::to_string(usable) + (usable < machine ? " of " + std::to_string(machine) : std::string());
}

// The BLAS library loaded beside LibTorch (Debian's), or MKL when LibTorch carries it inside (pip's
// x86-64 wheels link it statically, so no BLAS library is loaded).
std::string blas_text() {
  const std::string loaded = active_blas();
  return loaded == "none loaded" && at::hasMKL() ? "mkl (linked into LibTorch)" : loaded;
}

}  // namespace

// Appended piece by piece: one expression of + on string literals trips GCC 12's -Warray-bounds
// under C++20 (pip's LibTorch 2.x builds with it), an error with warnings as errors.
std::string runtime_info() {
  std::string info = "LibTorch ";
  info.append(TORCH_VERSION).append("\nBLAS: ").append(blas_text());
  info.append("\nCUDA: ").append(torch::cuda::is_available() ? "available" : "not available");
  info.append("\ncores: ").append(cores_text());
  info.append(" (intra-op threads default to one per usable core; see --threads)");
  return info;
}

}  // namespace traincache
