// The torch-free side of smart-bench's engine: the strategies' names, which the command line
// needs, and the entry point into libtraincache_engines.so (bench_module.cpp), loaded on the first
// call.
#include "bench_module.h"

namespace traincache::bench {

const Choices<Caching>& caching_choices() {
  static const Choices<Caching> c{{Caching::none, "none"},
                                  {Caching::full, "full"},
                                  {Caching::stochastic, "stochastic"},
                                  {Caching::smart, "smart"},
                                  {Caching::embed, "embed"}};
  return c;
}

void run_in_module(const BenchOptions& opts, const RecordFn& record, const InfoFn& info) {
  call_engines<decltype(tc_bench_run)>("tc_bench_run", &opts, &record, &info);
}

}  // namespace traincache::bench
