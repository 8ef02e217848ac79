#include "traincache/base/module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <vector>

#include "traincache/base/error.h"
#include "traincache_build_info.h"

namespace traincache {

namespace {
constexpr const char* kEnginesFile = "libtraincache_engines.so";
}  // namespace

void* open_module(const std::string& file, const char* env, int flags, const std::string& what) {
  std::vector<std::string> tried;
  char exe[4096];
  ssize_t n = 0;
  if (const char* path = std::getenv(env)) {
    tried.push_back(path);
  } else {
    if ((n = ::readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
      std::string dir(exe, static_cast<std::size_t>(n));
      tried.push_back(dir.substr(0, dir.rfind('/')) + "/../lib/" + file);
    }
    tried.push_back(std::string(TRAINCACHE_MODULE_DIR) + "/" + file);
  }
  std::string why;
  for (const auto& p : tried) {
    if (void* h = ::dlopen(p.c_str(), flags)) return h;
    why = ::dlerror();
  }
  throw Error(Exit::unavailable, what, "cannot load " + file + ": " + why);
}

void* module_symbol(void* handle, const char* name, const std::string& file, const std::string& what) {
  void* sym = ::dlsym(handle, name);
  if (!sym) throw Error(Exit::unavailable, what, file + " lacks " + name);
  return sym;
}

namespace {

// libgomp, which comes with LibTorch, reads OMP_WAIT_POLICY once, as it loads: its idle threads
// sleep instead of spinning, unless the user chose otherwise (cli/openmp_wait.cpp says why). Set
// only while the module loads, so that children see the environment the tool was given.
void* open_engines() {
  const bool ours = !std::getenv("OMP_WAIT_POLICY") && ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0) == 0;
  void* h = nullptr;
  try {
    h = open_module(kEnginesFile, "TRAINCACHE_ENGINES_MODULE", RTLD_NOW | RTLD_LOCAL, "LibTorch");
  } catch (...) {
    if (ours) ::unsetenv("OMP_WAIT_POLICY");
    throw;
  }
  if (ours) ::unsetenv("OMP_WAIT_POLICY");
  return h;
}

}  // namespace

void* engines_symbol(const char* name) {
  static void* const handle = open_engines();
  return module_symbol(handle, name, kEnginesFile, "LibTorch");
}

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

}  // namespace traincache
