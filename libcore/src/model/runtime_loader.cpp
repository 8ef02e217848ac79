// The torch-free side of --version's runtime lines (model_module.cpp), for the tools that link no
// LibTorch.
#include "model_module.h"
#include "traincache/model/runtime.h"

namespace traincache::model {

std::string runtime_info_in_module() {
  std::string text;
  call_engines<decltype(tc_runtime_info)>("tc_runtime_info", &text);
  return text;
}

}  // namespace traincache::model
