// smart-bench's entry point in libtraincache_engines.so (fill/fill_module.cpp says why the engines
// are a module).
#include "bench_module.h"

#include "traincache/model/encode.h"

namespace traincache::bench {

extern "C" __attribute__((visibility("default"))) void tc_bench_run(const BenchOptions* opts, const RecordFn* record,
                                                                    const InfoFn* info, ModuleFailure* failure) {
  guarded(failure, [&] { model::out_of_memory_as_error([&] { run(*opts, *record, *info); }); });
}

}  // namespace traincache::bench
