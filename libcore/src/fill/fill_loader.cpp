// The torch-free side of cache-inspect --verify: libtraincache_verify.so (verify_module.cpp says
// why it is a module), loaded the first time a program verifies or prints LibTorch's runtime.
#include <dlfcn.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "traincache/base/error.h"
#include "traincache/base/module.h"
#include "traincache/fill/verify.h"
#include "fill_module.h"

namespace traincache::fill {

bool VerifyReport::ok() const {
  return std::all_of(encoders.begin(), encoders.end(), [](const auto& e) { return e.ok(); });
}

namespace {

constexpr const char* kFile = "libtraincache_verify.so";

struct VerifyModule {
  RunVerifyFn run = nullptr;
  RuntimeInfoFn runtime_info = nullptr;
  SetVerboseFn h5_verbose = nullptr;

  static const VerifyModule& get() {
    static const VerifyModule m = open();
    return m;
  }

 private:
  static VerifyModule open() {
    // libgomp, which comes with LibTorch, reads OMP_WAIT_POLICY once, as it loads: idle threads
    // sleep instead of spinning, as in every tool linked with LibTorch (cli/openmp_wait.cpp),
    // unless the user chose otherwise.
    const bool ours = !std::getenv("OMP_WAIT_POLICY") && ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0) == 0;
    void* h = nullptr;
    try {
      h = open_module(kFile, "TRAINCACHE_VERIFY_MODULE", RTLD_NOW | RTLD_LOCAL, "LibTorch");
    } catch (...) {
      if (ours) ::unsetenv("OMP_WAIT_POLICY");
      throw;
    }
    if (ours) ::unsetenv("OMP_WAIT_POLICY");
    VerifyModule m;
    m.run = reinterpret_cast<RunVerifyFn>(module_symbol(h, "tc_verify_run", kFile, "LibTorch"));
    m.runtime_info = reinterpret_cast<RuntimeInfoFn>(module_symbol(h, "tc_verify_runtime_info", kFile, "LibTorch"));
    m.h5_verbose = reinterpret_cast<SetVerboseFn>(module_symbol(h, "tc_verify_h5_verbose", kFile, "LibTorch"));
    return m;
  }
};

// The module's failure as the exception the module caught (its kind and words).
void rethrow(const ModuleFailure& f) {
  switch (f.kind) {
    case 0:
      return;
    case 1:
      throw Error(static_cast<Exit>(f.code), "", f.message);
    case 2:
      throw std::bad_alloc();
    default:
      throw std::runtime_error(f.message);
  }
}

}  // namespace

VerifyReport run_verify_in_module(const VerifyOptions& opts) {
  VerifyReport report;
  ModuleFailure failure;
  const VerifyModule& m = VerifyModule::get();
  // The module's copy of the HDF5 layer prints HDF5's error stacks (-vv) when this thread does.
  H5E_auto2_t print = nullptr;
  void* print_data = nullptr;
  m.h5_verbose(H5Eget_auto2(H5E_DEFAULT, &print, &print_data) >= 0 && print != nullptr);
  m.run(&opts, &report, &failure);
  rethrow(failure);
  return report;
}

std::string runtime_info_in_module() {
  std::string text;
  ModuleFailure failure;
  VerifyModule::get().runtime_info(&text, &failure);
  rethrow(failure);
  return text;
}

}  // namespace traincache::fill
