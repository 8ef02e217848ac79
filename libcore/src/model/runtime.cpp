#include "traincache/model/runtime.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <thread>

#include "traincache/base/version.h"

namespace traincache {

std::string runtime_info() {
  return std::string("LibTorch ") + TORCH_VERSION + "\nBLAS: " + active_blas() +
         "\nCUDA: " + (torch::cuda::is_available() ? "available" : "not available") +
         "\ncores: " + std::to_string(std::thread::hardware_concurrency()) +
         " (intra-op threads default to one per core; see --threads)";
}

}  // namespace traincache
