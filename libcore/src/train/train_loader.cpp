// The torch-free side of gc-train's entry point into libtraincache_engines.so (train_module.cpp),
// loaded on the first call.
#include "train_module.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

TrainResult run_train_in_module(const TrainOptions& opts, const TrainCallbacks& cb) {
  validate_options(opts);    // a refused command line loads no LibTorch,
  check_cached_files(opts);  // nor a refused cache
  TrainResult result;
  call_engines<decltype(tc_train_run)>("tc_train_run", &opts, &cb, &result);
  return result;
}

}  // namespace traincache::train
