// The torch-free side of cache-fill's and cache-inspect --verify's entry points into
// libtraincache_engines.so (fill_module.cpp), loaded when there is work for LibTorch.
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <optional>

#include "fill_module.h"
#include "result.h"
#include "traincache/base/cores.h"
#include "traincache/base/module.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/model/precision.h"

namespace traincache::fill {

bool VerifyReport::ok() const {
  return std::all_of(encoders.begin(), encoders.end(), [](const auto& e) { return e.ok(); });
}

namespace {

// The encoders' files together: about what LibTorch allocates as it loads them.
std::size_t encoder_bytes(const FillOptions& opts) {
  std::size_t bytes = 0;
  struct stat st;
  for (const auto& e : opts.encoders)
    if (::stat(e.path.c_str(), &st) == 0) bytes += static_cast<std::size_t>(st.st_size);
  return bytes;
}

}  // namespace

// A CPU fill opens and checks its inputs, takes the output's lock, tells whether the cache is up
// to date, plans an update and opens its journal before it needs LibTorch, which a refused input,
// journal or an up-to-date cache then never loads. Once the lock is taken, where the fill is sure
// to encode (--force, or no cache yet), LibTorch loads on a thread of its own while the digests and
// the plan are made. A CUDA fill loads it first, as run_fill does, so that a device this machine
// lacks is 69 before any input is read, with CUDA's module first (base/module.h: load_cuda_module).
FillResult run_fill_in_module(const FillOptions& opts, const FillCallbacks& cb) {
  validate_options(opts);
  FillResult result;
  if (model::parse_device_spec(opts.device).cuda) {
    load_cuda_module();
    call_engines<decltype(tc_fill_run)>("tc_fill_run", &opts, &cb, &result);
    return result;
  }
  std::optional<EnginesLoad> loading;
  FillRun run = prepare_fill(opts, cb, [&] { loading.emplace(); });
  if (run.up_to_date()) return fill_result(run, FillEnding::up_to_date());
  plan_encoding(run);  // a journal that cannot be resumed is refused here
  // Loading LibTorch is the process's start, in none of the run's figures (docs/performance.md).
  const auto t_load = Clock::now();
  try {
    if (loading && usable_cores() > 1)  // this core idles until the load ends: the models' pages meanwhile
      warm_heap(encoder_bytes(opts), [&] { return loading->done(); });
    if (loading) loading->wait();
    engines_symbol("tc_fill_encode");
  } catch (...) {
    discard_unstarted(run);
    throw;
  }
  run.t_start += Clock::now() - t_load;
  call_engines<decltype(tc_fill_encode)>("tc_fill_encode", &run, &result);
  return result;
}

VerifyReport run_verify_in_module(const VerifyOptions& opts) {
  VerifyReport report;
  if (model::parse_device_spec(opts.device).cuda) load_cuda_module();
  call_engines<decltype(tc_verify_run)>("tc_verify_run", &opts, &report);
  return report;
}

}  // namespace traincache::fill
