// --version's runtime lines in libtraincache_engines.so (fill/fill_module.cpp says why the engines
// are a module).
#include "model_module.h"

#include "traincache/model/runtime.h"

namespace traincache::model {

extern "C" __attribute__((visibility("default"))) void tc_runtime_info(std::string* text, ModuleFailure* failure) {
  guarded(failure, [&] { *text = runtime_info(); });
}

}  // namespace traincache::model
