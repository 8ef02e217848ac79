// A cache's rows for vector-search tools: embeddings as .npy files of a chosen row count, keys
// and labels as JSON Lines beside them, in row order (cache-inspect --export npy). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traincache::io::cache {

struct ExportOptions {
  std::string cache;  ///< the cache file
  std::string dir;    ///< the folder to create (it must not exist)
  int64_t rows_per_file = 1000000;
  bool normalize = false;  ///< each vector (along the last axis) scaled to unit L2 norm, written as float32
  std::string labels;      ///< the label column written as "label" (its name); "" the first, /labels
};

struct ExportResult {
  std::string dir;
  int64_t rows = 0;
  int64_t files = 0;                  ///< .npy files per encoder (and metadata files)
  std::vector<std::string> encoders;  ///< one folder each
  int64_t nonfinite_rows = 0;         ///< rows holding NaN or Inf, summed over the encoders (copied as they are)
  int64_t stale_removed = 0;          ///< unfinished exports to `dir` that killed runs had left, removed
};

/// Writes `o.dir` (complete, or not at all: it is built under an unpredictable name beside it and
/// renamed into place):
///   ENCODER/ENCODER_00000.npy ...  each encoder's rows as stored (float32 or float16; with `normalize`
///                                  unit vectors in float32), `rows_per_file` rows a file (the last
///                                  may hold fewer), C order, little-endian; the file numbers have
///                                  five digits, more when there are over 100,000 files, so that
///                                  name order is row order
///   metadata/metadata_00000.jsonl  the same rows, a line each: {"row", "key", "label"} (a key or
///                                  label as stored: an integer or a string; no "label" without
///                                  labels), and "skipped": true for a row cache-fill skipped
/// Errors: a missing cache -> Error(no_input); an incomplete, unreadable or damaged one (datasets
/// that disagree with its row count) -> Error(data);
/// `o.dir` exists or cannot be created -> Error(cant_create); rows_per_file < 1 -> Error(usage);
/// a failed write -> Error(io), nothing left behind.
ExportResult export_npy(const ExportOptions& o);

/// The name of file `k` of `files` an export writes: "stem_00007.npy", its number as wide as the
/// largest one's (at least five digits), so that name order is row order past 100,000 files too.
std::string export_file_name(const std::string& stem, int64_t k, int64_t files, const char* ext);

}  // namespace traincache::io::cache
