#include "traincache/model/runtime.h"

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

}  // namespace

std::string runtime_info() {
  return std::string("LibTorch ") + TORCH_VERSION + "\nBLAS: " + active_blas() +
         "\nCUDA: " + (torch::cuda::is_available() ? "available" : "not available") + "\ncores: " + cores_text() +
         " (intra-op threads default to one per usable core; see --threads)";
}

}  // namespace traincache
