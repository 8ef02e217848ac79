// The torch-free side of gc-train's entry point into libtraincache_engines.so (train_module.cpp),
// loaded on the first call.
#include <algorithm>

#include "train_module.h"
#include "traincache/model/precision.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/text_fields.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

namespace {

// Whether a device the options name is a CUDA device: --device, --cache-device or one encoder's.
bool names_cuda(const TrainOptions& o) {
  auto cuda = [](const std::string& d) { return model::parse_device_spec(d).cuda; };
  return cuda(o.device) || cuda(o.cache_device) ||
         std::any_of(o.cache_devices.begin(), o.cache_devices.end(), [&](const auto& kv) { return cuda(kv.second); });
}

}  // namespace

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
  if (names_cuda(opts)) load_cuda_module();  // before the engines: base/module.h says why
  call_engines<decltype(tc_train_run)>("tc_train_run", &opts, &cb, &ahead, &result);
  return result;
}

}  // namespace traincache::train
