// gc-train's entry point in libtraincache_engines.so (fill/fill_module.cpp says why the engines
// are a module).
#include "train_module.h"

#include "traincache/model/encode.h"

namespace traincache::train {

extern "C" __attribute__((visibility("default"))) void tc_train_run(const TrainOptions* opts, const TrainCallbacks* cb,
                                                                    TextAhead* ahead, TrainResult* result,
                                                                    ModuleFailure* failure) {
  guarded(failure, [&] { model::out_of_memory_as_error([&] { *result = run_train(*opts, *cb, ahead); }); });
}

}  // namespace traincache::train
