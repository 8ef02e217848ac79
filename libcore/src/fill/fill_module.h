// The interface of libtraincache_verify.so, cache-inspect's LibTorch part: what verify_module.cpp
// defines and verify_loader.cpp looks up. Both sides are built from the same headers by the same
// compiler in one build, so C++ objects pass by pointer; exceptions never cross (each function
// reports its failure in a ModuleFailure instead).
#pragma once

#include <string>

#include "traincache/fill/verify.h"

namespace traincache::fill {

/// How a module function failed: kind 0 none, 1 traincache::Error (code, message), 2 out of memory,
/// 3 any other exception (message).
struct ModuleFailure {
  int kind = 0;
  int code = 0;
  std::string message;
};

extern "C" {
/// run_verify(*opts) into *report.
using RunVerifyFn = void (*)(const VerifyOptions* opts, VerifyReport* report, ModuleFailure* failure);
/// runtime_info() into *text.
using RuntimeInfoFn = void (*)(std::string* text, ModuleFailure* failure);
/// h5::set_verbose(on) in the module's own copy of the HDF5 layer (-vv's error stacks).
using SetVerboseFn = void (*)(bool on);
}

}  // namespace traincache::fill
