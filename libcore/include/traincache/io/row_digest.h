// Digests of dataset rows for fingerprints: HDF5 datasets read in bounded blocks (rows larger
// than a block are read in pieces, so a dataset larger than memory still streams), and slab items.
// Torch-free.
#pragma once

#include <hdf5.h>

#include <cstdint>

#include "traincache/base/content_hash.h"
#include "traincache/io/h5.h"

namespace traincache {

namespace slab {
class Slab;
}

namespace io {

/// Feeds rows [a, b) of `dset` to `h` in their native representation, at most `block_bytes` at a
/// time. The digest depends only on the data, never on `block_bytes`. With `rows` (numbers only),
/// also each row's own digest, of its bytes alone, into rows[r - a], from the same reads.
void hash_rows(hid_t dset, const h5::DatasetInfo& info, int64_t a, int64_t b, ContentHash& h,
               int64_t block_bytes = 8 << 20, Digest128* rows = nullptr);

/// Feeds items [a, b) of a slab to `h`; an item that is not cached -> Error(data).
void hash_slab_rows(const slab::Slab& slab, int64_t a, int64_t b, ContentHash& h);

}  // namespace io
}  // namespace traincache
