// libtraincache_verify.so: cache-inspect's LibTorch part (--verify, and the runtime lines of
// --version), a module that cache-inspect loads when it needs it (verify_loader.cpp). Everything
// else cache-inspect does (summaries, --check, --head, --stats, --export, --help) reads HDF5 only,
// and a process that links LibTorch spends about 0.6 s before main on Debian's (relocations across
// its ~290 libraries and the operator registry): cache-inspect in a script's loop paid that on
// every call.
#include "fill_module.h"

#include <new>

#include "traincache/base/error.h"
#include "traincache/io/h5.h"
#include "traincache/model/runtime.h"

namespace traincache::fill {

namespace {

template <class F>
void guarded(ModuleFailure* failure, F&& body) noexcept {
  try {
    body();
  } catch (const Error& e) {
    *failure = {1, static_cast<int>(e.code()), e.what()};
  } catch (const std::bad_alloc&) {
    *failure = {2, 0, {}};
  } catch (const std::exception& e) {
    *failure = {3, 0, e.what()};
  } catch (...) {
    *failure = {3, 0, "unknown exception"};
  }
}

}  // namespace

}  // namespace traincache::fill

extern "C" {

__attribute__((visibility("default"))) void tc_verify_run(const traincache::fill::VerifyOptions* opts,
                                                          traincache::fill::VerifyReport* report,
                                                          traincache::fill::ModuleFailure* failure) {
  traincache::fill::guarded(failure, [&] { *report = traincache::fill::run_verify(*opts); });
}

__attribute__((visibility("default"))) void tc_verify_h5_verbose(bool on) { traincache::h5::set_verbose(on); }

__attribute__((visibility("default"))) void tc_verify_runtime_info(std::string* text,
                                                                   traincache::fill::ModuleFailure* failure) {
  traincache::fill::guarded(failure, [&] { *text = traincache::model::runtime_info(); });
}

}  // extern "C"
