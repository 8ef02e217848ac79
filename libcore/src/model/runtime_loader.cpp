// The torch-free side of --version's runtime lines (model_module.cpp), for the tools that link no
// LibTorch.
#include "model_module.h"
#include "traincache/model/runtime.h"

namespace traincache::model {

std::string runtime_info_in_module() {
  std::string text;
  try {
    load_cuda_module();  // so that the CUDA line answers for CUDA's libraries (base/module.h)
  } catch (const Error&) {
    // the CUDA line says CUDA is not available, and why (cuda_module_failure)
  }
  call_engines<decltype(tc_runtime_info)>("tc_runtime_info", &text);
  return text;
}

}  // namespace traincache::model
