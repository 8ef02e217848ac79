// The torch-free side of gc-train's entry point into libtraincache_engines.so (train_module.cpp),
// loaded on the first call.
#include "train_module.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

TrainResult run_train_in_module(const TrainOptions& opts, const TrainCallbacks& cb) {
  validate_options(opts);  // a refused command line loads no LibTorch
  static const auto run = reinterpret_cast<decltype(&tc_train_run)>(engines_symbol("tc_train_run"));
  TrainResult result;
  ModuleFailure failure;
  run(&opts, &cb, &result, &failure);
  rethrow(failure);
  return result;
}

}  // namespace traincache::train
