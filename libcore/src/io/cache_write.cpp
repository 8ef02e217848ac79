// Writing caches: what cache-fill and merge assemble (the columns, the embeddings from their
// spill files, skipped rows and row digests), and the reading of those last two; the reading and
// checking of caches is cache_file.cpp's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/json_text.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/h5.h"

namespace traincache::io::cache {

using nlohmann::json;

// ---- writing -------------------------------------------------------------------------------

int64_t chunk_rows(int64_t row_bytes, int64_t rows) {
  int64_t r = (1 << 20) / std::max<int64_t>(1, row_bytes);
  return std::max<int64_t>(1, std::min(r, std::max<int64_t>(1, rows)));
}

namespace {

void write_attrs(hid_t obj, const Attrs& attrs) {
  for (const auto& attr : attrs) std::visit([&](const auto& v) { h5::write_attr(obj, attr.first, v); }, attr.second);
}

h5::Id create_dataset(hid_t file, const std::string& name, hid_t ftype, const std::vector<int64_t>& shape,
                      int64_t row_bytes) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  std::vector<hsize_t> chunk = dims;
  chunk[0] = static_cast<hsize_t>(chunk_rows(row_bytes, shape[0]));
  h5::Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  h5::Id dcpl = h5::untimed_create_plist(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
  h5::create_parent_groups(file, name);
  hid_t id = H5Dcreate2(file, name.c_str(), ftype, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT);
  h5::check(id, Exit::io, name, "cannot create dataset");
  return h5::Id(id);
}

// Rows [start, start + rows) of a string column that is not HDF5 as UTF-8 variable-length strings.
void copy_strings(const source::Column& col, hid_t out, const std::string& dst, int64_t start, int64_t rows) {
  h5::Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  h5::Id dd = create_dataset(out, dst, type.get(), {rows}, 32);
  h5::write_attr(dd.get(), "source", col.info().name);
  constexpr int64_t kBlock = 65536;
  for (int64_t s = 0; s < rows; s += kBlock) {
    const int64_t n = std::min(kBlock, rows - s);
    std::vector<std::string> v = col.read_strings(start + s, n);
    std::vector<const char*> p;
    for (const auto& x : v) p.push_back(x.c_str());
    h5::write_rows(dd.get(), dst, s, n, type.get(), p.data());
  }
}

// Rows [start, start + rows) of `col` as dataset `dst` of `out`, with a "source" attribute. An
// HDF5 column is copied in its own file type (strings included); others are written from reads.
void copy_column(const source::Column& col, hid_t out, const std::string& dst, int64_t start, int64_t rows) {
  const auto& ci = col.info();
  std::vector<int64_t> shape = ci.shape;
  shape[0] = rows;
  if (hid_t sd = col.hdf5_dataset(); sd >= 0) {
    auto di = h5::describe(sd, ci.name);
    h5::Id ftype(H5Dget_type(sd));
    h5::Id mtype(di.dtype == DType::string ? H5Tcopy(ftype.get()) : H5Tget_native_type(ftype.get(), H5T_DIR_ASCEND));
    int64_t row_bytes = static_cast<int64_t>(H5Tget_size(mtype.get())) * di.row_elements();
    h5::Id dd = create_dataset(out, dst, ftype.get(), shape, row_bytes);
    h5::write_attr(dd.get(), "source", ci.name);
    h5::copy_rows(sd, col.path() + ": " + ci.name, start, dd.get(), dst, 0, rows);
    return;
  }
  if (ci.dtype == DType::string) {
    copy_strings(col, out, dst, start, rows);
    return;
  }
  h5::Id half = h5::float16_type();
  hid_t type = ci.dtype == DType::f16 ? half.get() : h5::native_type(ci.dtype);
  const int64_t row_bytes = static_cast<int64_t>(ci.row_bytes());
  h5::Id dd = create_dataset(out, dst, type, shape, row_bytes);
  h5::write_attr(dd.get(), "source", ci.name);
  if (!col.label_names().empty()) h5::write_attr(dd.get(), "label_names", json_text(json(col.label_names())));
  const int64_t block = h5::rows_per_block(row_bytes, 8 << 20);
  std::vector<char> buf;
  for (int64_t s = 0; s < rows; s += block) {
    int64_t n = std::min(block, rows - s);
    buf.resize(static_cast<std::size_t>(n * row_bytes));
    col.read(start + s, n, buf.data());
    h5::write_rows(dd.get(), dst, s, n, type, buf.data());
  }
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> read_skipped(const std::string& path) {
  std::vector<std::pair<int64_t, std::string>> out;
  h5::Id f = h5::open_file(path);
  if (!h5::exists(f.get(), "/skipped/rows")) return out;
  h5::Id rd = h5::open_dataset(f.get(), path, "/skipped/rows");
  h5::Id sd = h5::open_dataset(f.get(), path, "/skipped/reasons");
  const int64_t n = h5::describe(rd.get(), "/skipped/rows").rows();
  if (h5::describe(sd.get(), "/skipped/reasons").rows() != n)
    throw Error(Exit::data, path, "/skipped/rows and /skipped/reasons differ in length");
  std::vector<int64_t> rows(static_cast<std::size_t>(n));
  h5::read_rows(rd.get(), path + ": /skipped/rows", 0, n, H5T_NATIVE_INT64, rows.data());
  h5::Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  std::vector<char*> reasons(static_cast<std::size_t>(n), nullptr);
  h5::read_rows(sd.get(), path + ": /skipped/reasons", 0, n, type.get(), reasons.data());
  for (int64_t i = 0; i < n; ++i) {
    out.emplace_back(rows[i], reasons[i] ? reasons[i] : "");
    std::free(reasons[i]);  // HDF5 allocates variable-length strings with malloc
  }
  return out;
}

void write_skipped(hid_t f, const std::vector<std::pair<int64_t, std::string>>& skipped) {
  if (skipped.empty()) return;
  const int64_t n = static_cast<int64_t>(skipped.size());
  std::vector<int64_t> rows;
  std::vector<const char*> reasons;
  for (const auto& [r, why] : skipped) {
    rows.push_back(r);
    reasons.push_back(why.c_str());
  }
  h5::Id rd = create_dataset(f, "/skipped/rows", H5T_STD_I64LE, {n}, 8);
  h5::write_rows(rd.get(), "/skipped/rows", 0, n, H5T_NATIVE_INT64, rows.data());
  h5::Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  h5::Id sd = create_dataset(f, "/skipped/reasons", type.get(), {n}, 32);
  h5::write_rows(sd.get(), "/skipped/reasons", 0, n, type.get(), reasons.data());
}

namespace {

// A dataset of 16-byte digests, one per cache row (/row_digests, /row_file_digests); empty when absent.
std::vector<Digest128> read_digests(const std::string& path, const char* name) {
  std::vector<Digest128> out;
  h5::Id f = h5::open_file(path);
  if (!h5::exists(f.get(), name)) return out;
  h5::Id d = h5::open_dataset(f.get(), path, name);
  const h5::DatasetInfo di = h5::describe(d.get(), name);
  const auto rows = h5::read_attr_int(f.get(), "rows");
  if (di.shape.size() != 2 || di.shape[1] != 16 || di.dtype != DType::u8 || !rows || di.rows() != *rows)
    throw Error(Exit::data, path, std::string(name) + " is not uint8 [rows, 16] with one row per cache row");
  out.resize(static_cast<std::size_t>(di.rows()));
  if (!out.empty()) h5::read_rows(d.get(), path + ": " + name, 0, di.rows(), H5T_NATIVE_UINT8, out.data());
  return out;
}

void write_digests(hid_t f, const AssemblySpec& spec, const char* name, const std::vector<Digest128>& digests) {
  if (digests.empty()) return;
  const int64_t n = static_cast<int64_t>(digests.size());
  if (n != spec.rows)
    throw Error(Exit::internal, spec.out_path, std::string(name) + ": digests and rows differ in number");
  h5::Id d = create_dataset(f, name, H5T_STD_U8LE, {n, 16}, 16);
  h5::write_attr(d.get(), "inputs", spec.row_digest_inputs);
  h5::write_rows(d.get(), name, 0, n, H5T_NATIVE_UINT8, digests.data());
}

void write_row_digests(hid_t f, const AssemblySpec& spec) {
  write_digests(f, spec, "/row_digests", spec.row_digests);
  write_digests(f, spec, "/row_file_digests", spec.row_file_digests);
}

}  // namespace

std::vector<Digest128> read_row_digests(const std::string& path) { return read_digests(path, "/row_digests"); }

std::vector<Digest128> read_row_file_digests(const std::string& path) {
  return read_digests(path, "/row_file_digests");
}

namespace {

// Reads exactly `n` bytes of `fd` (the raw file `path`) into `out`.
void read_fully(int fd, const std::string& path, char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(Exit::io, path, errno_text(errno));
    if (r == 0) throw Error(Exit::data, path, "journal shorter than its committed rows");
    got += static_cast<std::size_t>(r);
  }
}

// Rows [s, s + n) of the new cache into `buf`: each from the raw file (the next one in order) or,
// for an update, copied from the updated cache's row that e.kept_rows names.
void block_rows(int fd, const EmbeddingSource& e, int64_t s, int64_t n, int64_t row_bytes, std::vector<char>& buf) {
  buf.resize(static_cast<std::size_t>(n * row_bytes));
  if (e.kept_rows.empty()) {
    read_fully(fd, e.raw_path, buf.data(), buf.size());
    return;
  }
  std::vector<int64_t> kept;
  int64_t encoded = 0;
  for (int64_t r = s; r < s + n; ++r) {
    const int64_t k = e.kept_rows[static_cast<std::size_t>(r)];
    if (k >= 0)
      kept.push_back(k);
    else
      ++encoded;
  }
  std::vector<char> from_raw(static_cast<std::size_t>(encoded * row_bytes)), from_kept(kept.size() * row_bytes);
  if (encoded > 0) read_fully(fd, e.raw_path, from_raw.data(), from_raw.size());
  if (!kept.empty()) e.kept->read_rows(kept, from_kept.data());
  const char *raw = from_raw.data(), *old = from_kept.data();
  for (int64_t r = 0; r < n; ++r) {
    const char*& src = e.kept_rows[static_cast<std::size_t>(s + r)] >= 0 ? old : raw;
    std::memcpy(buf.data() + r * row_bytes, src, static_cast<std::size_t>(row_bytes));
    src += row_bytes;
  }
}

// Writes the rows of one journal raw file (with an update's kept rows among them) into a new
// dataset of `f`.
void write_embedding(hid_t f, const EmbeddingSource& e, int64_t rows, hid_t half) {
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), e.row_shape.begin(), e.row_shape.end());
  int64_t per_row = 1;
  for (auto d : e.row_shape) per_row *= d;
  hid_t type = e.dtype == DType::f16 ? half : H5T_IEEE_F32LE;
  int64_t row_bytes = per_row * static_cast<int64_t>(dtype_size(e.dtype));
  if (!e.kept_rows.empty() && (static_cast<int64_t>(e.kept_rows.size()) != rows || !e.kept ||
                               static_cast<int64_t>(e.kept->info().row_bytes()) != row_bytes))
    throw Error(Exit::internal, e.raw_path, "the kept rows do not match the cache being written");
  std::string dname = "/embeddings/" + e.name;
  h5::Id d = create_dataset(f, dname, type, shape, row_bytes);
  write_attrs(d.get(), e.attrs);
  // An update that encoded nothing has no raw file: every row is copied.
  const bool raw = e.kept_rows.empty() || std::count(e.kept_rows.begin(), e.kept_rows.end(), -1) > 0;
  int fd = raw ? ::open(e.raw_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (raw && fd < 0) throw Error(Exit::io, e.raw_path, errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  int64_t block = h5::rows_per_block(row_bytes, 8 << 20);
  std::vector<char> buf;
  for (int64_t s = 0; s < rows; s += block) {
    int64_t n = std::min(block, rows - s);
    block_rows(fd, e, s, n, row_bytes, buf);
    h5::write_rows(d.get(), dname, s, n, type, buf.data());
  }
}

// The label columns: /labels, then /label_columns/NAME, each named by its `name` attribute, and
// the root's `label_columns` listing them in order.
void write_labels(hid_t f, const AssemblySpec& spec) {
  json list = json::array();
  for (std::size_t i = 0; i < spec.labels.size(); ++i) {
    const auto& l = spec.labels[i];
    const std::string dst = i == 0 ? std::string(kLabels) : std::string(kLabelColumns) + "/" + l.name;
    copy_column(*l.col, f, dst, spec.row_start, spec.rows);
    h5::Id d(H5Dopen2(f, dst.c_str(), H5P_DEFAULT));
    h5::check(d.get(), Exit::io, dst, "cannot open the dataset just written");
    h5::write_attr(d.get(), "name", l.name);
    h5::write_attr(d.get(), "source", l.source);
    list.push_back({{"name", l.name}, {"dataset", dst}, {"source", l.source}});
  }
  if (!list.empty()) h5::write_attr(f, "label_columns", json_text(list));
}

}  // namespace

void assemble(const AssemblySpec& spec) {
  files::TempPath tmp(spec.out_path);
  h5::Id file = h5::create_temp_file(tmp);
  hid_t f = file.get();
  h5::write_attr(f, "format", std::string(kFormatName));
  h5::write_attr(f, "format_version", kFormatVersion);
  h5::write_attr(f, "complete", int64_t{0});
  h5::write_attr(f, "rows", spec.rows);
  h5::write_attr(f, "row_start", spec.row_start);
  write_attrs(f, spec.root_attrs);
  {
    h5::Id half = h5::float16_type();
    for (const auto& e : spec.embeddings) write_embedding(f, e, spec.rows, half.get());
  }
  write_labels(f, spec);
  if (spec.keys) copy_column(*spec.keys, f, "/keys", spec.row_start, spec.rows);
  write_skipped(f, spec.skipped);
  write_row_digests(f, spec);
  h5::write_attr(f, "complete", int64_t{1});
  h5::close_file(file, spec.out_path);
  tmp.publish();  // fsync, then rename: a reader sees no file or a complete one
}

}  // namespace traincache::io::cache
