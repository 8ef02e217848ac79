// The torch-free side of --version's runtime lines (model_module.cpp), for the tools that link no
// LibTorch.
#include "model_module.h"
#include "traincache/model/runtime.h"

namespace traincache::model {

std::string runtime_info_in_module() {
  std::string text, cuda_failure;
  try {
    load_cuda_module();  // so that the CUDA line answers for CUDA's libraries (base/module.h)
  } catch (const Error& e) {
    cuda_failure = e.what();  // the line says CUDA is not available, and why
    if (cuda_failure.rfind("CUDA: ", 0) == 0) cuda_failure.erase(0, 6);
  }
  call_engines<decltype(tc_runtime_info)>("tc_runtime_info", &text);
  const std::string line = "CUDA: not available";
  if (auto at = text.find(line); !cuda_failure.empty() && at != std::string::npos)
    text.insert(at + line.size(), " (" + cuda_failure + ")");
  return text;
}

}  // namespace traincache::model
