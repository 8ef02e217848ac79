// The torch-free side of gc-train's entry point into libtraincache_engines.so (train_module.cpp),
// loaded on the first call.
#include "train_module.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/text_fields.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

TrainResult run_train_in_module(const TrainOptions& opts, const TrainCallbacks& cb) {
  // A refused command line loads no LibTorch, nor a refused cache, checkpoint or text field. The
  // ranks of a data-parallel job check their data after joining, so that one rank's failure
  // reaches the others.
  validate_options(opts);
  check_plan(opts);
  if (!read_launch().distributed()) {
    check_cached_files(opts);
    check_raw_columns(opts);
    check_resume_file(opts);
  }
  TextAhead ahead = read_text_ahead(opts);  // --data's texts, read once: the engine takes them
  TrainResult result;
  call_engines<decltype(tc_train_run)>("tc_train_run", &opts, &cb, &ahead, &result);
  return result;
}

}  // namespace traincache::train
