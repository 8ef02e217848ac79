// The pure stages of cache-fill's engine, without tensors or files: option checks, which rows a
// run (or a shard of it) encodes, and which settings two fingerprints disagree on. Torch-free, so
// unit tests cover them without LibTorch (docs/design.md, "Stages").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "traincache/fill/fill.h"

namespace traincache::fill {

/// Checks the options that need no input: encoders given, unique and well-named; an output; a
/// positive batch size; a storage dtype of float32 or float16. Error(usage) otherwise.
void validate_options(const FillOptions& opts);

/// The rows one run encodes: [begin, end) of the input, inside the job's [job_begin, job_end).
struct RowPlan {
  int64_t begin = 0, end = 0;
  int64_t job_begin = 0, job_end = 0;
  bool sharded = false;
  int64_t rows() const { return end - begin; }
};

/// Applies --rows to an input of `input_rows` rows and, with --shard I/N, takes shard I's
/// contiguous, balanced range of whole batches (so every row is encoded in the same batch as by a
/// single process). An input of several files (`groups`: the first row of each, ascending; tar
/// shards) is shared out by whole files instead, and batches never span two (unit_ranges).
/// Error(usage) for ranges outside the input and for more shards than batches (or files).
RowPlan plan_rows(const FillOptions& opts, int64_t input_rows, const std::vector<int64_t>& groups = {});

/// The units a run reads, encodes and commits together over rows [begin, end): `unit` rows each,
/// cut short where a group of `groups` begins (so that a shard of whole groups batches its rows
/// as a single process does) and at `end`. As (first row, rows) pairs, in order.
std::vector<std::pair<int64_t, int64_t>> unit_ranges(int64_t begin, int64_t end, int64_t unit,
                                                     const std::vector<int64_t>& groups);

/// The settings (JSON paths such as "encoders/cnn/sha256", "input/rows") in which fingerprint
/// documents differ, comma-separated; "unreadable stored fingerprint" when the old one is not JSON.
std::string fingerprint_diff(const std::string& old_json, const std::string& now_json);

/// The file shard I of N writes: "<out>.shard-I-of-N".
std::string shard_path(const std::string& out, int index, int count);

}  // namespace traincache::fill
