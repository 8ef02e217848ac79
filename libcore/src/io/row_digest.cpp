#include "traincache/io/row_digest.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::io {

namespace {

// Feeds one row whose bytes exceed a block: pieces of consecutive indices along the first axis
// whose trailing sub-array fits a block, visited in row-major order (the same byte order as a
// whole-row read).
void hash_large_row(hid_t dset, const h5::DatasetInfo& info, int64_t row, hid_t mtype, int64_t elem,
                    int64_t block_bytes, ContentHash& h, ContentHash* own) {
  const auto& shape = info.shape;
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> suffix(static_cast<std::size_t>(nd) + 1, 1);
  for (int i = nd - 1; i >= 0; --i) suffix[i] = suffix[i + 1] * shape[i];
  int k = 1;
  while (k < nd - 1 && suffix[k + 1] * elem > block_bytes) ++k;
  const int64_t step = std::max<int64_t>(1, block_bytes / std::max<int64_t>(1, suffix[k + 1] * elem));
  std::vector<hsize_t> start(nd, 0), count(nd, 1);
  start[0] = static_cast<hsize_t>(row);
  for (int i = k + 1; i < nd; ++i) count[i] = static_cast<hsize_t>(shape[i]);
  std::vector<int64_t> idx(nd, 0);
  std::vector<char> buf;
  h5::Id fspace(H5Dget_space(dset));
  while (true) {
    for (int i = 1; i < k; ++i) start[i] = static_cast<hsize_t>(idx[i]);
    for (int64_t j = 0; j < shape[k]; j += step) {
      start[k] = static_cast<hsize_t>(j);
      count[k] = static_cast<hsize_t>(std::min(step, shape[k] - j));
      hsize_t n = count[k] * static_cast<hsize_t>(suffix[k + 1]);
      buf.resize(n * static_cast<std::size_t>(elem));
      h5::Id mspace(H5Screate_simple(1, &n, nullptr));
      if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
          H5Dread(dset, mtype, mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()) < 0)
        throw Error(Exit::io, info.name, "cannot read row " + std::to_string(row) + ": " + h5::last_error());
      h.update(buf.data(), buf.size());
      if (own) own->update(buf.data(), buf.size());
    }
    int axis = k - 1;  // advance the indices of the axes before k, last fastest
    while (axis >= 1 && ++idx[axis] == shape[axis]) idx[axis--] = 0;
    if (axis < 1) return;
  }
}

}  // namespace

void hash_rows(hid_t dset, const h5::DatasetInfo& info, int64_t a, int64_t b, ContentHash& h, int64_t block_bytes,
               Digest128* rows) {
  h.update(info.name + '\0');
  h5::Id ftype(H5Dget_type(dset));
  bool str = info.dtype == DType::string;
  h5::Id mtype(str ? H5Tcopy(ftype.get()) : H5Tget_native_type(ftype.get(), H5T_DIR_ASCEND));
  const int64_t elem = static_cast<int64_t>(H5Tget_size(mtype.get()));
  int64_t row_bytes = 0;
  if (__builtin_mul_overflow(elem, info.row_elements(), &row_bytes))
    throw Error(Exit::data, info.name, "a row's size does not fit 63 bits");
  if (rows && (str || info.vlen_string))
    throw Error(Exit::internal, info.name, "row digests of strings are taken row by row");
  if (!info.vlen_string && row_bytes > block_bytes && info.shape.size() > 1) {
    for (int64_t r = a; r < b; ++r) {
      ContentHash own;
      hash_large_row(dset, info, r, mtype.get(), elem, block_bytes, h, rows ? &own : nullptr);
      if (rows) rows[r - a] = own.digest();
    }
    return;
  }
  int64_t block = h5::rows_per_block(row_bytes, block_bytes);
  std::vector<char> buf;
  for (int64_t s = a; s < b; s += block) {
    stop_if_interrupted("digesting the input (nothing was written)");
    int64_t n = std::min(block, b - s);
    buf.resize(static_cast<std::size_t>(n * row_bytes));
    h5::read_rows(dset, info.name, s, n, mtype.get(), buf.data());
    if (info.vlen_string) {
      auto* ptrs = reinterpret_cast<char**>(buf.data());
      for (int64_t i = 0; i < n * info.row_elements(); ++i) {
        h.update(ptrs[i], ptrs[i] ? std::strlen(ptrs[i]) + 1 : 0);
        H5free_memory(ptrs[i]);
      }
    } else {
      h.update(buf.data(), buf.size());
      for (int64_t r = 0; rows && r < n; ++r) {
        ContentHash own;
        own.update(buf.data() + r * row_bytes, static_cast<std::size_t>(row_bytes));
        rows[s - a + r] = own.digest();
      }
    }
  }
}

void hash_slab_rows(const slab::Slab& slab, int64_t a, int64_t b, ContentHash& h) {
  slab.check_size();
  const bool variable = slab.info().layout == slab::Layout::variable;
  for (int64_t i = a; i < b; ++i) {
    auto v = slab.view(static_cast<uint64_t>(i));
    if (!v)
      throw Error(Exit::data, slab.info().name,
                  "index " + std::to_string(i) + " is not cached (shm-cache fill it first)");
    if (variable) {  // framed: the same values split into other items digest differently
      const uint64_t n = v.bytes;
      h.update(&n, sizeof n);
    }
    h.update(v.data, v.bytes);
  }
}

}  // namespace traincache::io
