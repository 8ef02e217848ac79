// cache-fill's and cache-inspect --verify's part of libtraincache_engines.so: what fill_module.cpp
// defines in the module and fill_loader.cpp looks up (base/module.h). Both sides are built from the
// same headers by the same compiler in one build and share libtraincache_core.so, so C++ objects
// pass by pointer; exceptions do not cross (each function reports its failure in a ModuleFailure).
#pragma once

#include "prepare.h"
#include "traincache/base/module.h"
#include "traincache/fill/fill.h"
#include "traincache/fill/verify.h"

namespace traincache::fill {

extern "C" {
/// run_fill(*opts, *cb) into *result.
void tc_fill_run(const FillOptions* opts, const FillCallbacks* cb, FillResult* result, ModuleFailure* failure);
/// encode_fill(*run) into *result.
void tc_fill_encode(FillRun* run, FillResult* result, ModuleFailure* failure);
/// run_verify(*opts) into *report.
void tc_verify_run(const VerifyOptions* opts, VerifyReport* report, ModuleFailure* failure);
}

}  // namespace traincache::fill
