// Merging the shard files of a sharded cache-fill into one cache (cache-fill merge). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traincache::fill {

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

/// Waits until every file in `paths` exists (a shard file appears, by rename, only when complete),
/// looking every 200 ms. Error(temp_failure) listing the missing files once `timeout_seconds` have
/// passed (0: no limit); Error(interrupted) on SIGINT/SIGTERM.
void wait_for_shards(const std::vector<std::string>& paths, double timeout_seconds);

}  // namespace traincache::fill
