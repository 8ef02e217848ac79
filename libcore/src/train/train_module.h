// gc-train's part of libtraincache_engines.so: what train_module.cpp defines in the module and
// train_loader.cpp looks up (base/module.h; fill/fill_module.h says how the two sides meet).
#pragma once

#include "traincache/base/module.h"
#include "traincache/train/train.h"

namespace traincache::train {

extern "C" {
/// run_train(*opts, *cb, ahead) into *result.
void tc_train_run(const TrainOptions* opts, const TrainCallbacks* cb, TextAhead* ahead, TrainResult* result,
                  ModuleFailure* failure);
}

}  // namespace traincache::train
