// A cache's rows for vector-search tools: embeddings as .npy files of a chosen row count, keys
// and labels as JSON Lines beside them, in row order (cache-inspect --export npy). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traincache::cache {

struct ExportOptions {
  std::string cache;  ///< the cache file
  std::string dir;    ///< the folder to create (it must not exist)
  int64_t rows_per_file = 1000000;
};

struct ExportResult {
  std::string dir;
  int64_t rows = 0;
  int64_t files = 0;                  ///< .npy files per encoder (and metadata files)
  std::vector<std::string> encoders;  ///< one folder each
};

/// Writes `o.dir` (complete, or not at all: it is built under an unpredictable name beside it and
/// renamed into place):
///   ENCODER/ENCODER_00000.npy ...  each encoder's rows as stored (float32 or float16), `rows_per_file`
///                                  rows a file (the last may hold fewer), C order, little-endian
///   metadata/metadata_00000.jsonl  the same rows, a line each: {"row", "key", "label"} (a key or
///                                  label as stored: an integer or a string; no "label" without
///                                  labels), and "skipped": true for a row cache-fill skipped
/// Errors: a missing cache -> Error(no_input); an incomplete or unreadable one -> Error(data);
/// `o.dir` exists or cannot be created -> Error(cant_create); rows_per_file < 1 -> Error(usage);
/// a failed write -> Error(io), nothing left behind.
ExportResult export_npy(const ExportOptions& o);

}  // namespace traincache::cache
