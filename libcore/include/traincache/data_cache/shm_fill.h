// Filling a shared-memory slab from a source's column (shm-cache fill): an HDF5 dataset (fixed or
// variable-length rows), a .npy file, an .npz member, an image folder or a manifest. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "traincache/io/source.h"

namespace traincache::data_cache {

/// What to copy.
struct FillFromOptions {
  std::string slab;
  std::string file;
  std::string dataset;                  ///< "" = the source's default column (a .npy file, an image folder)
  io::source::FileOptions files;        ///< preprocessing of images
  int64_t row_begin = 0, row_end = -1;  ///< rows [begin, end) of the dataset = slab indices
  int workers = 1;                      ///< threads, each filling a contiguous part
};

/// What was copied.
struct FillFromResult {
  uint64_t rows = 0;     ///< rows looked at
  uint64_t stored = 0;   ///< items written by this call
  uint64_t skipped = 0;  ///< not cacheable, already filled or being written, or arena full
  uint64_t bytes = 0;    ///< bytes written by this call
  double seconds = 0;
};

/// Copies rows into the slab. Fixed layout: each row must hold the slab's item shape (values are
/// converted to the slab's dtype by HDF5). Variable layout: rows of a variable-length dataset, or of
/// any numeric dataset (each row one item). Safe to run in several processes at once.
FillFromResult fill_from_hdf5(const FillFromOptions& opts);

}  // namespace traincache::data_cache
