#include "traincache/base/module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "traincache/base/error.h"
#include "traincache_build_info.h"

namespace traincache {

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

}  // namespace traincache
