// Built with OpenMP and without the torch PCH (libcore/CMakeLists.txt): see parallel.h.
#include "traincache/model/parallel.h"

#include <ATen/Parallel.h>

#ifndef _OPENMP
#error "model/parallel.cpp must be compiled with OpenMP, as LibTorch's intra-op threads are"
#endif

namespace traincache::model {

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  at::parallel_for(begin, end, grain, body);
}

}  // namespace traincache::model
