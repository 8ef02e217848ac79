#include "traincache/shm_fill.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "traincache/error.h"
#include "traincache/h5.h"
#include "traincache/shm_slab.h"
#include "traincache/text.h"

namespace traincache::shm {

FillFromResult fill_from_hdf5(const FillFromOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  Slab probe = Slab::attach(o.slab);
  SlabInfo si = probe.info();
  h5::Id file = h5::open_file(o.file);
  h5::Id dset = h5::open_dataset(file.get(), o.file, o.dataset);
  auto di = h5::describe(dset.get(), o.dataset);
  h5::Id ftype(H5Dget_type(dset.get()));
  bool vlen = H5Tget_class(ftype.get()) == H5T_VLEN;
  if (!vlen && (di.dtype == DType::string || di.dtype == DType::other))
    throw Error(Exit::data, o.file, "dataset '" + o.dataset + "' is not numeric");
  int64_t n = di.rows();
  int64_t a = o.row_begin, b = o.row_end < 0 ? n : o.row_end;
  if (a < 0 || b > n || a >= b)
    throw Error(
        Exit::usage, "--rows",
        std::to_string(a) + ":" + std::to_string(b) + " is outside the dataset's " + std::to_string(n) + " rows");
  if (static_cast<uint64_t>(b) > si.length)
    throw Error(Exit::data, o.slab,
                "rows up to " + std::to_string(b) + " do not fit the slab's length " + std::to_string(si.length));
  hid_t elem = h5::native_type(si.dtype);
  h5::Id mem_type;
  uint64_t row_bytes = 0;
  if (si.layout == Layout::fixed) {
    if (vlen)
      throw Error(Exit::data, o.file, "dataset '" + o.dataset + "' has variable-length rows; the slab is fixed-shape");
    std::vector<int64_t> row(di.shape.begin() + 1, di.shape.end()), want(si.dims.begin(), si.dims.end());
    if (row != want)
      throw Error(Exit::data, o.file,
                  "dataset '" + o.dataset + "' rows are " + shape_text(row) + "; the slab holds " + shape_text(want));
    row_bytes = si.item_bytes;
  } else if (vlen) {
    mem_type = h5::Id(H5Tvlen_create(elem));
  } else {
    row_bytes = static_cast<uint64_t>(di.row_elements()) * dtype_size(si.dtype);
  }

  std::atomic<uint64_t> stored{0}, skipped{0}, bytes{0};
  std::exception_ptr error;
  std::mutex error_mu;
  int workers = std::max(1, std::min<int>(o.workers, static_cast<int>(b - a)));
  auto work = [&](int64_t lo, int64_t hi) {
    try {
      Slab slab = Slab::attach(o.slab);
      const int64_t block = vlen ? 256 : h5::rows_per_block(static_cast<int64_t>(row_bytes), 4 << 20);
      std::vector<unsigned char> buf;
      std::vector<hvl_t> vl;
      for (int64_t s = lo; s < hi; s += block) {
        int64_t c = std::min(block, hi - s);
        if (vlen) {
          vl.resize(static_cast<std::size_t>(c));
          h5::read_rows(dset.get(), o.file + ": " + o.dataset, s, c, mem_type.get(), vl.data());
          for (int64_t i = 0; i < c; ++i) {
            std::size_t nb = vl[i].len * dtype_size(si.dtype);
            if (slab.set(static_cast<uint64_t>(s + i), vl[i].p, nb))
              ++stored, bytes += nb;
            else
              ++skipped;
          }
          hsize_t dims[1] = {static_cast<hsize_t>(c)};
          h5::Id space(H5Screate_simple(1, dims, nullptr));
          H5Dvlen_reclaim(mem_type.get(), space.get(), H5P_DEFAULT, vl.data());
        } else {
          buf.resize(static_cast<std::size_t>(c) * row_bytes);
          h5::read_rows(dset.get(), o.file + ": " + o.dataset, s, c, elem, buf.data());
          for (int64_t i = 0; i < c; ++i) {
            if (slab.set(static_cast<uint64_t>(s + i), buf.data() + i * row_bytes, row_bytes))
              ++stored, bytes += row_bytes;
            else
              ++skipped;
          }
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  int64_t per = (b - a + workers - 1) / workers;
  for (int w = 0; w < workers; ++w) {
    int64_t lo = a + w * per, hi = std::min(b, lo + per);
    if (lo < hi) threads.emplace_back(work, lo, hi);
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  FillFromResult r;
  r.rows = static_cast<uint64_t>(b - a);
  r.stored = stored;
  r.skipped = skipped;
  r.bytes = bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace traincache::shm
