// The torch-free side of --version's runtime lines (model_module.cpp), for the tools that link no
// LibTorch.
#include "model_module.h"
#include "traincache/model/runtime.h"

namespace traincache::model {

std::string runtime_info_in_module() {
  static const auto info = reinterpret_cast<decltype(&tc_runtime_info)>(engines_symbol("tc_runtime_info"));
  std::string text;
  ModuleFailure failure;
  info(&text, &failure);
  rethrow(failure);
  return text;
}

}  // namespace traincache::model
