// model/'s part of libtraincache_engines.so: what model_module.cpp defines in the module and
// runtime_loader.cpp looks up (base/module.h; fill/fill_module.h says how the two sides meet).
#pragma once

#include <string>

#include "traincache/base/module.h"

namespace traincache::model {

extern "C" {
/// runtime_info() into *text.
void tc_runtime_info(std::string* text, ModuleFailure* failure);
}

}  // namespace traincache::model
