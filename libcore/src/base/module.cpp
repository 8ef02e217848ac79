#include "traincache/base/module.h"

#include <dlfcn.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <vector>

#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/base/openmp_wait.h"
#include "traincache_build_info.h"

namespace traincache {

namespace {

constexpr const char* kEnginesFile = "libtraincache_engines.so";

// Loads the libraries MODULE.load-order lists (the build writes it with scripts/load-order), one
// dlopen each, every library after those it needs. The dynamic loader looks each symbol up along
// the scope of the dlopen that loads the library: for the module's one dlopen that is all of its
// ~290 libraries, and Debian's LibTorch binds ~165,000 symbols at load, so a third of a tool's
// start went to walking that list; loaded leaves first, each library's scope is only what it needs
// (docs/design.md, "Loading LibTorch"). A library that cannot load alone (one that relies on a
// sibling's symbols) is left to the module's own dlopen, as is everything when there is no list.
void load_dependencies(const std::string& module) {
  std::ifstream list(module + ".load-order");
  std::string library;
  while (std::getline(list, library))
    if (!library.empty() && !::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL)) ::dlerror();
}

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
    if (::access(p.c_str(), F_OK) == 0) load_dependencies(p);
    if (void* h = ::dlopen(p.c_str(), flags)) return h;
    why = ::dlerror();
  }
  throw Error(Exit::unavailable, what, "cannot load " + file + ": " + why);
}

bool keep_freed_memory() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return false;
  for (const char* chosen : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(chosen)) return false;
  return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
#else
  return false;
#endif
}

void warm_heap(std::size_t bytes, const std::function<bool()>& stop) {
  constexpr std::size_t kBlock = 8 << 20, kMost = 192 << 20;  // under the threshold and the trim
  if (!keep_freed_memory()) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<char*> blocks;
  for (std::size_t done = 0; done < std::min(bytes, kMost) && !stop(); done += kBlock) {
    char* b = static_cast<char*>(std::malloc(kBlock));
    if (!b) break;
    volatile char* touch = b;  // stores the compiler may not drop before the free
    for (std::size_t i = 0; i < kBlock; i += static_cast<std::size_t>(page)) touch[i] = 0;
    blocks.push_back(b);
  }
  // The last block first: each merges with the free top below it.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) std::free(*b);
}

void* module_symbol(void* handle, const char* name, const std::string& file, const std::string& what) {
  void* sym = ::dlsym(handle, name);
  if (!sym) throw Error(Exit::unavailable, what, file + " lacks " + name);
  return sym;
}

namespace {

// libgomp, which comes with LibTorch, reads its waiting settings once, as it loads: unless the user
// chose (either variable set), its idle threads spin briefly and then sleep (base/openmp_wait.h).
// Set only while the module loads, so that children see the environment the tool was given. Set
// and unset on the thread that asks for the load (setenv beside another thread's getenv is a race).
bool set_openmp_wait() {
  if (std::getenv(kOmpPolicyVariable) || std::getenv(kOmpSpinVariable)) return false;
  ::setenv(kOmpPolicyVariable, kOmpPolicy, 0);
  ::setenv(kOmpSpinVariable, kOmpSpinCount, 0);
  return true;
}

void unset_openmp_wait() {
  ::unsetenv(kOmpPolicyVariable);
  ::unsetenv(kOmpSpinVariable);
}

// Loads a module that loads LibTorch, FILE (ENV names another): malloc's settings and the CPU list
// checked first, and libgomp's waiting settings set while it loads where SET_WAIT.
void* open_torch_module(const char* file, const char* env, const std::string& what, bool set_wait) {
  keep_freed_memory();
  check_openmp_affinity();  // a list libgomp cannot bind to ends the process once LibTorch runs
  const bool set = set_wait && set_openmp_wait();
  try {
    void* h = open_module(file, env, RTLD_NOW | RTLD_LOCAL, what);
    if (set) unset_openmp_wait();
    return h;
  } catch (...) {
    if (set) unset_openmp_wait();
    throw;
  }
}

// The engines module's handle, loaded on the first call (a second thread's call waits for it).
void* engines_handle(bool set_wait) {
  static void* const handle = open_torch_module(kEnginesFile, "TRAINCACHE_ENGINES_MODULE", "LibTorch", set_wait);
  return handle;
}

constexpr const char* kCudaFile = "libtraincache_cuda.so";

void* cuda_handle() {
  static void* const handle = [] {
    if (!TRAINCACHE_WITH_CUDA_MODULE)
      throw Error(Exit::unavailable, "CUDA", "this build has no CUDA module (its LibTorch has no CUDA)");
    return open_torch_module(kCudaFile, "TRAINCACHE_CUDA_MODULE", "CUDA", true);
  }();
  return handle;
}

}  // namespace

namespace {

std::string& cuda_failure() {
  static std::string why;
  return why;
}

}  // namespace

void load_cuda_module() {
  if (!TRAINCACHE_WITH_CUDA_MODULE) return;
  try {
    cuda_handle();
  } catch (const Error& e) {
    cuda_failure() = e.what();
    throw;
  }
}

std::string cuda_module_failure() { return cuda_failure(); }

void* cuda_symbol(const char* name) { return module_symbol(cuda_handle(), name, kCudaFile, "CUDA"); }

void* engines_symbol(const char* name) { return module_symbol(engines_handle(true), name, kEnginesFile, "LibTorch"); }

EnginesLoad::EnginesLoad() : set_wait_(set_openmp_wait()) {
  thread_ = std::thread([this] {
    try {
      engines_handle(false);
    } catch (...) {
      failure_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
  });
}

EnginesLoad::~EnginesLoad() { join(); }

void EnginesLoad::join() {
  if (thread_.joinable()) thread_.join();
  if (set_wait_) unset_openmp_wait();
  set_wait_ = false;
}

void EnginesLoad::wait() {
  join();
  if (failure_) std::rethrow_exception(failure_);
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
