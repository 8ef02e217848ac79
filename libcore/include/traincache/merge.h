// Merging the shard files of a sharded cache-fill into one cache (cache-fill merge). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traincache::cache {

/// What to merge.
struct MergeOptions {
  std::string out;
  std::vector<std::string> shards;
  bool copy = false;  ///< copy the data; otherwise HDF5 virtual datasets over the shard files
};

/// Checks that the shards are complete, of one job (same encoders, options, input and dtypes) and
/// cover the job's rows exactly once, then writes `out` (temporary name, then rename). Gaps,
/// overlaps, missing shards and mismatched shards -> Error(data) naming them.
void merge_shards(const MergeOptions& opts);

}  // namespace traincache::cache
