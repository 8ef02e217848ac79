// The torch-free side of cache-fill's and cache-inspect --verify's entry points into
// libtraincache_engines.so (fill_module.cpp), loaded on the first call.
#include <algorithm>

#include "fill_module.h"
#include "traincache/fill/fill_plan.h"

namespace traincache::fill {

bool VerifyReport::ok() const {
  return std::all_of(encoders.begin(), encoders.end(), [](const auto& e) { return e.ok(); });
}

FillResult run_fill_in_module(const FillOptions& opts, const FillCallbacks& cb) {
  validate_options(opts);  // a refused command line loads no LibTorch
  static const auto run = reinterpret_cast<decltype(&tc_fill_run)>(engines_symbol("tc_fill_run"));
  FillResult result;
  ModuleFailure failure;
  run(&opts, &cb, &result, &failure);
  rethrow(failure);
  return result;
}

VerifyReport run_verify_in_module(const VerifyOptions& opts) {
  static const auto run = reinterpret_cast<decltype(&tc_verify_run)>(engines_symbol("tc_verify_run"));
  VerifyReport report;
  ModuleFailure failure;
  run(&opts, &report, &failure);
  rethrow(failure);
  return report;
}

}  // namespace traincache::fill
