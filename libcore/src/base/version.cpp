#include "traincache/base/version.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "traincache_build_info.h"

namespace traincache {

const char* version() { return TRAINCACHE_VERSION; }
const char* git_revision() { return TRAINCACHE_GIT_REVISION; }

namespace {
int find_blas(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (info->dlpi_name && std::strstr(info->dlpi_name, "libblas.so")) {
    char resolved[PATH_MAX];
    if (realpath(info->dlpi_name, resolved))
      *out = resolved;
    else
      *out = info->dlpi_name;
    return 1;
  }
  return 0;
}
}  // namespace

std::string active_blas() {
  std::string path;
  dl_iterate_phdr(find_blas, &path);
  if (path.empty()) return "none loaded";
  std::string kind = "unknown";
  if (path.find("openblas-openmp") != std::string::npos)
    kind = "openblas (openmp)";
  else if (path.find("openblas-pthread") != std::string::npos)
    kind = "openblas (pthread)";
  else if (path.find("openblas") != std::string::npos)
    kind = "openblas";
  else if (path.find("/blas/") != std::string::npos)
    kind = "reference netlib blas (slow)";
  else if (path.find("blis") != std::string::npos)
    kind = "blis";
  else if (path.find("mkl") != std::string::npos)
    kind = "mkl";
  return kind + " " + path;
}

std::string version_banner(const std::string& tool) { return tool + " " + version() + " (git " + git_revision() + ")"; }

}  // namespace traincache
