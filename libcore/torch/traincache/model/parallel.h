// LibTorch's intra-op threads for the library's own loops. at::parallel_for runs its body on
// LibTorch's OpenMP threads only in code compiled with OpenMP (ATen/ParallelOpenMP.h), else on the
// calling thread alone; this one is compiled with it (libcore/CMakeLists.txt). Needs LibTorch.
#pragma once

#include <cstdint>
#include <functional>

namespace traincache::model {

/// at::parallel_for(begin, end, grain, body) on LibTorch's intra-op threads (at most
/// at::get_num_threads(), none with fewer than `grain` items): `body(a, b)` once per block [a, b),
/// the blocks contiguous and in order of the threads. Rethrows the first exception a body threw.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

}  // namespace traincache::model
