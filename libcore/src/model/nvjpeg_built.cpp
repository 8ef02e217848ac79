// model::nvjpeg_built (runtime.h), torch-free: what configure found.
#include "traincache/model/runtime.h"
#include "traincache_nvjpeg_config.h"

namespace traincache::model {

bool nvjpeg_built() { return TRAINCACHE_WITH_NVJPEG; }

}  // namespace traincache::model
