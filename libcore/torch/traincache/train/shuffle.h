// The epoch order of gc-train's training rows, drawn without LibTorch's thread pool: the
// streaming reader draws it on its own thread, where an OpenMP-parallel torch operation would
// start a second OpenMP team and, on a machine with as many cores as the step uses, make every
// thread of the step's team sleep at its barriers instead of spinning (measured: 15,000 instead
// of 1,000 context switches in 40 steps, 10-20% slower steps). Header without torch.
#pragma once

#include <cstdint>
#include <vector>

namespace traincache::train {

/// A permutation of 0..n-1: the one torch::randperm(n, generator) returns for a CPU generator
/// seeded with `seed` (tests/unit/model/encode_test.cpp compares them), drawn with plain loops on the
/// calling thread.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace traincache::train
