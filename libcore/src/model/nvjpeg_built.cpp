// model::nvjpeg_built and require_nvjpeg (runtime.h), torch-free: what configure found.
#include "traincache/base/error.h"
#include "traincache/model/runtime.h"
#include "traincache_nvjpeg_config.h"

namespace traincache::model {

bool nvjpeg_built() { return TRAINCACHE_WITH_NVJPEG; }

void require_nvjpeg() {
  if (!nvjpeg_built())
    throw Error(Exit::unavailable, "nvJPEG", "this build has none (libcore/CMakeLists.txt says where it looks)");
}

}  // namespace traincache::model
