#include "traincache/data_cache/shm_fill.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/io/h5.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::data_cache {

namespace {

// Rows [a, b) checked against the source's n rows and the slab's length.
void check_rows(const FillFromOptions& o, const slab::SlabInfo& si, int64_t a, int64_t b, int64_t n) {
  if (a < 0 || b > n || a >= b)
    throw Error(
        Exit::usage, "--rows",
        std::to_string(a) + ":" + std::to_string(b) + " is outside the dataset's " + std::to_string(n) + " rows");
  if (static_cast<uint64_t>(b) > si.length)
    throw Error(Exit::data, o.slab,
                "rows up to " + std::to_string(b) + " do not fit the slab's length " + std::to_string(si.length));
}

// Runs work(lo, hi) on up to `workers` threads over contiguous parts of [a, b); rethrows the
// first error.
void on_workers(int64_t a, int64_t b, int workers, const std::function<void(int64_t, int64_t)>& work) {
  std::exception_ptr error;
  std::mutex error_mu;
  workers = std::max(1, std::min<int>(workers, static_cast<int>(b - a)));
  std::vector<std::thread> threads;
  const int64_t per = (b - a + workers - 1) / workers;
  for (int w = 0; w < workers; ++w) {
    const int64_t lo = a + w * per, hi = std::min(b, lo + per);
    if (lo < hi)
      threads.emplace_back([&, lo, hi] {
        try {
          work(lo, hi);
        } catch (...) {
          std::lock_guard<std::mutex> lk(error_mu);
          if (!error) error = std::current_exception();
        }
      });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Rows s..s+c-1 of equal size from buf into the slab (index = row), counted.
void store_rows(slab::Slab& slab, int64_t s, int64_t c, const unsigned char* buf, std::size_t row_bytes,
                std::atomic<uint64_t>& stored, std::atomic<uint64_t>& skipped, std::atomic<uint64_t>& bytes) {
  for (int64_t i = 0; i < c; ++i) {
    if (slab.set(static_cast<uint64_t>(s + i), buf + i * row_bytes, row_bytes))
      ++stored, bytes += row_bytes;
    else
      ++skipped;
  }
}

// A source that is not HDF5, through the source layer: its rows must have the slab's element
// type (and, for a fixed slab, its item shape).
FillFromResult fill_from_column(const FillFromOptions& o, const slab::SlabInfo& si, std::atomic<uint64_t>& stored,
                                std::atomic<uint64_t>& skipped, std::atomic<uint64_t>& bytes) {
  const std::string name = o.dataset.empty() ? io::source::default_column(o.file) : o.dataset;
  std::shared_ptr<const io::source::Column> col =
      io::source::open_column(o.file, name, o.files, io::source::Role::images);
  const io::source::ColumnInfo& ci = col->info();
  if (ci.dtype != si.dtype)
    throw Error(Exit::data, o.file,
                "'" + ci.name + "' holds " + dtype_name(ci.dtype) + "; the slab holds " + dtype_name(si.dtype));
  const std::vector<int64_t> row(ci.shape.begin() + 1, ci.shape.end()), want(si.dims.begin(), si.dims.end());
  if (si.layout == slab::Layout::fixed && row != want)
    throw Error(Exit::data, o.file,
                "'" + ci.name + "' rows are " + shape_text(row) + "; the slab holds " + shape_text(want));
  const int64_t a = o.row_begin, b = o.row_end < 0 ? ci.rows() : o.row_end;
  check_rows(o, si, a, b, ci.rows());
  const std::size_t row_bytes = ci.row_bytes();
  on_workers(a, b, o.workers, [&](int64_t lo, int64_t hi) {
    slab::Slab slab = slab::Slab::attach(o.slab);
    const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((4u << 20) / std::max<std::size_t>(1, row_bytes)));
    std::vector<unsigned char> buf;
    for (int64_t s = lo; s < hi; s += block) {
      const int64_t c = std::min(block, hi - s);
      buf.resize(static_cast<std::size_t>(c) * row_bytes);
      col->read(s, c, buf.data());
      store_rows(slab, s, c, buf.data(), row_bytes, stored, skipped, bytes);
    }
  });
  FillFromResult r;
  r.rows = static_cast<uint64_t>(b - a);
  return r;
}

}  // namespace

FillFromResult fill_from_hdf5(const FillFromOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  slab::Slab probe = slab::Slab::attach(o.slab);
  slab::SlabInfo si = probe.info();
  if (io::source::kind_of(o.file) != io::source::Kind::hdf5) {
    std::atomic<uint64_t> stored{0}, skipped{0}, bytes{0};
    FillFromResult r = fill_from_column(o, si, stored, skipped, bytes);
    r.stored = stored;
    r.skipped = skipped;
    r.bytes = bytes;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  if (o.dataset.empty()) throw Error(Exit::usage, "--dataset", "name the dataset of the HDF5 file to read");
  io::h5::Id file = io::h5::open_file(o.file);
  io::h5::Id dset = io::h5::open_dataset(file.get(), o.file, o.dataset);
  auto di = io::h5::describe(dset.get(), o.dataset);
  io::h5::Id ftype(H5Dget_type(dset.get()));
  bool vlen = H5Tget_class(ftype.get()) == H5T_VLEN;
  if (!vlen && (di.dtype == DType::string || di.dtype == DType::other))
    throw Error(Exit::data, o.file, "dataset '" + o.dataset + "' is not numeric");
  int64_t n = di.rows();
  int64_t a = o.row_begin, b = o.row_end < 0 ? n : o.row_end;
  check_rows(o, si, a, b, n);
  hid_t elem = io::h5::native_type(si.dtype);
  io::h5::Id mem_type;
  uint64_t row_bytes = 0;
  if (si.layout == slab::Layout::fixed) {
    if (vlen)
      throw Error(Exit::data, o.file, "dataset '" + o.dataset + "' has variable-length rows; the slab is fixed-shape");
    std::vector<int64_t> row(di.shape.begin() + 1, di.shape.end()), want(si.dims.begin(), si.dims.end());
    if (row != want)
      throw Error(Exit::data, o.file,
                  "dataset '" + o.dataset + "' rows are " + shape_text(row) + "; the slab holds " + shape_text(want));
    row_bytes = si.item_bytes;
  } else if (vlen) {
    mem_type = io::h5::Id(H5Tvlen_create(elem));
  } else {
    row_bytes = static_cast<uint64_t>(di.row_elements()) * dtype_size(si.dtype);
  }

  std::atomic<uint64_t> stored{0}, skipped{0}, bytes{0};
  on_workers(a, b, o.workers, [&](int64_t lo, int64_t hi) {
    {
      slab::Slab slab = slab::Slab::attach(o.slab);
      const int64_t block = vlen ? 256 : io::h5::rows_per_block(static_cast<int64_t>(row_bytes), 4 << 20);
      std::vector<unsigned char> buf;
      std::vector<hvl_t> vl;
      for (int64_t s = lo; s < hi; s += block) {
        int64_t c = std::min(block, hi - s);
        if (vlen) {
          vl.resize(static_cast<std::size_t>(c));
          io::h5::read_rows(dset.get(), o.file + ": " + o.dataset, s, c, mem_type.get(), vl.data());
          for (int64_t i = 0; i < c; ++i) {
            std::size_t nb = vl[i].len * dtype_size(si.dtype);
            if (slab.set(static_cast<uint64_t>(s + i), vl[i].p, nb))
              ++stored, bytes += nb;
            else
              ++skipped;
          }
          hsize_t dims[1] = {static_cast<hsize_t>(c)};
          io::h5::Id space(H5Screate_simple(1, dims, nullptr));
          H5Dvlen_reclaim(mem_type.get(), space.get(), H5P_DEFAULT, vl.data());
        } else {
          buf.resize(static_cast<std::size_t>(c) * row_bytes);
          io::h5::read_rows(dset.get(), o.file + ": " + o.dataset, s, c, elem, buf.data());
          store_rows(slab, s, c, buf.data(), row_bytes, stored, skipped, bytes);
        }
      }
    }
  });
  FillFromResult r;
  r.rows = static_cast<uint64_t>(b - a);
  r.stored = stored;
  r.skipped = skipped;
  r.bytes = bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace traincache::data_cache
