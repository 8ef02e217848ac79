// cache-fill's and cache-inspect --verify's entry points in libtraincache_engines.so, the module
// that holds the LibTorch part of the tools (base/module.h). A process linked to LibTorch spends
// about 0.5 s before main on Debian's (relocations across its ~290 libraries and the operator
// registry) and more on pip's CUDA build; the tools load it only once their options are checked
// and there is work for it, so --help, a summary and a refused command line start at once.
#include "fill_module.h"

#include "traincache/model/encode.h"

namespace traincache::fill {

extern "C" {

__attribute__((visibility("default"))) void tc_fill_run(const FillOptions* opts, const FillCallbacks* cb,
                                                        FillResult* result, ModuleFailure* failure) {
  guarded(failure, [&] { model::out_of_memory_as_error([&] { *result = run_fill(*opts, *cb); }); });
}

__attribute__((visibility("default"))) void tc_fill_encode(FillRun* run, FillResult* result, ModuleFailure* failure) {
  guarded(failure, [&] { model::out_of_memory_as_error([&] { *result = encode_fill(*run); }); });
}

__attribute__((visibility("default"))) void tc_verify_run(const VerifyOptions* opts, VerifyReport* report,
                                                          ModuleFailure* failure) {
  guarded(failure, [&] { model::out_of_memory_as_error([&] { *report = run_verify(*opts); }); });
}

}  // extern "C"

}  // namespace traincache::fill
