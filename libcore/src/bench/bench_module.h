// smart-bench's part of libtraincache_engines.so: what bench_module.cpp defines in the module and
// bench_loader.cpp looks up (base/module.h; fill/fill_module.h says how the two sides meet).
#pragma once

#include <functional>
#include <string>

#include "traincache/base/module.h"
#include "traincache/bench/smart_bench.h"

namespace traincache::bench {

using RecordFn = std::function<void(const EpochRecord&)>;
using InfoFn = std::function<void(const std::string&)>;

extern "C" {
/// run(*opts, *record, *info).
void tc_bench_run(const BenchOptions* opts, const RecordFn* record, const InfoFn* info, ModuleFailure* failure);
}

}  // namespace traincache::bench
