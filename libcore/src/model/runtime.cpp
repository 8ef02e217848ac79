#include "traincache/model/runtime.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <thread>

#include "traincache/base/cores.h"
#include "traincache/base/module.h"
#include "traincache/base/version.h"
#include "traincache/model/int8.h"
#include "traincache/model/onednn_linear.h"

namespace traincache::model {

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

// "available", or "not available" and, where CUDA's module could not be loaded, why.
std::string cuda_text() {
  if (torch::cuda::is_available()) return "available";
  std::string why = cuda_module_failure();  // Error's "CUDA: cannot load ...": the subject goes
  if (why.rfind("CUDA: ", 0) == 0) why.erase(0, 6);
  return why.empty() ? "not available" : "not available (" + why + ")";
}

}  // namespace

std::string runtime_info() {
  const std::string no_int8 = int8_unavailable();
  return std::string("LibTorch ") + TORCH_VERSION + "\nBLAS: " + blas_text() +
         "\nfloat32 linear layers: " + (onednn_linears_available() ? "oneDNN (optimised modules on the CPU)" : "BLAS") +
         "\nCUDA: " + cuda_text() +
         "\nnvJPEG: " + (nvjpeg_built() ? "built in (cache-fill --decode device)" : "not built in") + "\nint8: " +
         (no_int8.empty() ? int8_engine() + " engine (cache-fill --precision int8)" : "not available: " + no_int8) +
         "\ncores: " + cores_text() + " (intra-op threads default to one per usable core; see --threads)";
}

}  // namespace traincache::model
