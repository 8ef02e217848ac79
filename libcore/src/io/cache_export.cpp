#include "traincache/io/cache_export.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/json_text.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/h5.h"
#include "traincache/io/npy.h"
#include "traincache/io/source.h"

namespace traincache::io::cache {

namespace {

using Json = nlohmann::ordered_json;  // metadata lines: row, key, label, in this order

// A private folder beside `dest` under an unpredictable name, removed with what it holds unless
// publish() renamed it to `dest` (which must not exist then either). It is locked (flock) while
// this object lives, so that a later export can tell one a killed export left (removed_stale())
// from one being written.
class TempDir {
 public:
  explicit TempDir(std::string dest) : dest_(std::move(dest)) {
    removed_ = remove_stale(dest_);
    for (int tries = 0;; ++tries) {
      path_ = files::unpredictable_name(dest_);
      if (::mkdir(path_.c_str(), 0700) == 0) break;
      if (errno != EEXIST || tries > 100) throw Error(Exit::cant_create, dest_, "cannot create: " + errno_text(errno));
    }
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      files::remove_tree(path_);
      throw Error(Exit::cant_create, dest_, "cannot lock the folder being written: " + errno_text(err));
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!published_) files::remove_tree(path_);
    if (fd_ >= 0) ::close(fd_);
  }
  // Unfinished exports to `dest` whose exporter is gone (killed: their folder's lock is free).
  int removed_stale() const { return removed_; }
  const std::string& path() const { return path_; }
  // A folder inside (0777 less the umask: only the private folder around it keeps others out).
  void make_dir(const std::string& name) const {
    if (::mkdir((path_ + "/" + name).c_str(), 0777) != 0)
      throw Error(Exit::cant_create, dest_ + "/" + name, "cannot create: " + errno_text(errno));
  }

  void publish() {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::chmod(path_.c_str(), 0777 & ~mask) != 0) throw Error(Exit::io, dest_, errno_text(errno));
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_NOREPLACE) != 0)
      throw Error(Exit::cant_create, dest_, errno == EEXIST ? "exists (remove it first)" : errno_text(errno));
    published_ = true;
    const int fd = ::open(files::dir_name(dest_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);  // the rename is durable
      ::close(fd);
    }
  }

 private:
  static int remove_stale(const std::string& dest) {
    int removed = 0;
    for (const std::string& left : files::temp_names_of(dest)) {
      struct stat st;
      if (::lstat(left.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
      const int fd = ::open(left.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && files::remove_tree(left) == 0) ++removed;
      ::close(fd);
    }
    return removed;
  }

  std::string dest_, path_;
  int fd_ = -1;
  int removed_ = 0;
  bool published_ = false;
};

// True when row `r` of `rows` (each `row_elements` floats of `dtype` f32 or f16, as stored) holds a
// NaN or an infinity: every exponent bit set.
bool nonfinite_row(DType dtype, const char* rows, int64_t r, int64_t row_elements) {
  if (dtype == DType::f32) {
    const char* p = rows + r * row_elements * 4;
    for (int64_t k = 0; k < row_elements; ++k) {
      uint32_t bits;
      std::memcpy(&bits, p + 4 * k, 4);
      if ((bits & 0x7f800000u) == 0x7f800000u) return true;
    }
  } else if (dtype == DType::f16) {
    const char* p = rows + r * row_elements * 2;
    for (int64_t k = 0; k < row_elements; ++k) {
      uint16_t bits;
      std::memcpy(&bits, p + 2 * k, 2);
      if ((bits & 0x7c00u) == 0x7c00u) return true;
    }
  }
  return false;
}

// Scales each vector along the last axis of `n` rows to unit L2 norm; zero and non-finite vectors
// are left as they are.
void l2_normalize(float* v, int64_t n, int64_t row_elements, int64_t dim) {
  for (int64_t i = 0; i < n * row_elements; i += dim) {
    double sq = 0;
    for (int64_t k = 0; k < dim; ++k) sq += double(v[i + k]) * v[i + k];
    if (!(sq > 0) || !std::isfinite(sq)) continue;
    const double inv = 1.0 / std::sqrt(sq);
    for (int64_t k = 0; k < dim; ++k) v[i + k] = static_cast<float>(v[i + k] * inv);
  }
}

// Values `v` (row-major) as JSON nested by `dims` from `d` on: a list per dimension.
Json nested(const std::vector<Json>& v, std::size_t& at, const std::vector<int64_t>& dims, std::size_t d) {
  if (d == dims.size()) return v[at++];
  Json out = Json::array();
  for (int64_t i = 0; i < dims[d]; ++i) out.push_back(nested(v, at, dims, d + 1));
  return out;
}

// A column's rows [a, b) as JSON values, one per row: a string (keys, string labels), a number
// (integer or floating point, as stored), or for rows of several values lists nested as the row's
// shape (multi-column or float labels: whatever cache-fill stored).
std::vector<Json> json_values(const source::Column& col, int64_t a, int64_t b) {
  std::vector<Json> out;
  const auto& ci = col.info();
  if (ci.dtype == DType::string) {
    for (auto& s : col.read_strings(a, b - a)) out.emplace_back(std::move(s));
    return out;
  }
  const auto n = static_cast<std::size_t>((b - a) * ci.row_elements());
  std::vector<Json> values;
  if (is_integer(ci.dtype)) {
    std::vector<char> raw(static_cast<std::size_t>(b - a) * ci.row_bytes());
    col.read(a, b - a, raw.data());
    std::vector<int64_t> v(n);
    to_int64(ci.dtype, raw.data(), v.data(), n);
    values.assign(v.begin(), v.end());
  } else if (is_float(ci.dtype) && col.hdf5_dataset() >= 0) {
    std::vector<double> v(n);
    h5::read_rows(col.hdf5_dataset(), col.path() + ": " + ci.name, a, b - a, H5T_NATIVE_DOUBLE, v.data());
    values.assign(v.begin(), v.end());
  } else {
    throw Error(Exit::data, col.path(), "'" + ci.name + "' holds neither numbers nor strings");
  }
  const std::vector<int64_t> dims(ci.shape.begin() + 1, ci.shape.end());
  std::size_t at = 0;
  for (int64_t r = a; r < b; ++r) out.push_back(nested(values, at, dims, 0));
  return out;
}

// One .npy file: rows [a, b) of `col`, as stored or (`normalize`) as unit vectors in float32,
// copied in blocks of about 64 MiB (a file may hold far more than memory should). Returns the rows
// that hold NaN or an infinity.
int64_t write_npy(const source::Column& col, int64_t a, int64_t b, const std::string& path, bool normalize) {
  const auto& ci = col.info();
  std::vector<int64_t> shape = ci.shape;
  shape[0] = b - a;
  const DType out_type = normalize ? DType::f32 : ci.dtype;
  const int64_t row_bytes = ci.row_elements() * static_cast<int64_t>(dtype_size(out_type));
  const int64_t block = h5::rows_per_block(std::max<int64_t>(row_bytes, 1), int64_t{64} << 20);
  files::TempFile out(path);
  const std::string header = npy::make_header(out_type, shape);
  out.write_all(header.data(), header.size());
  std::vector<char> rows;
  int64_t nonfinite = 0;
  for (int64_t s = a; s < b; s += block) {
    stop_if_interrupted("exporting (the unfinished export removed)");
    const int64_t n = std::min(block, b - s);
    rows.resize(static_cast<std::size_t>(n * row_bytes));
    if (normalize)  // HDF5 converts float16 to float32 on the way
      h5::read_rows(col.hdf5_dataset(), col.path() + ": " + ci.name, s, n, H5T_NATIVE_FLOAT, rows.data());
    else
      col.read(s, n, rows.data());
    for (int64_t r = 0; r < n; ++r) nonfinite += nonfinite_row(out_type, rows.data(), r, ci.row_elements());
    if (normalize) l2_normalize(reinterpret_cast<float*>(rows.data()), n, ci.row_elements(), ci.shape.back());
    out.write_all(rows.data(), rows.size());
  }
  out.commit();
  return nonfinite;
}

// "DIR/" and "DIR" name the same folder; the temporary one is made beside it, not inside.
std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

std::string export_file_name(const std::string& stem, int64_t k, int64_t files, const char* ext) {
  int width = 1;  // digits of the largest number, at least five
  for (int64_t n = files > 0 ? files - 1 : 0; n >= 10; n /= 10) ++width;
  char buf[48];
  std::snprintf(buf, sizeof buf, "_%0*lld", std::max(width, 5), static_cast<long long>(k));
  return stem + buf + ext;
}

ExportResult export_npy(const ExportOptions& o) {
  if (o.rows_per_file < 1) throw Error(Exit::usage, "--rows-per-file", "must be at least 1");
  const CacheInfo info = read_info(o.cache, false);
  if (!info.complete) throw Error(Exit::data, o.cache, "incomplete cache: nothing to export");
  // What --check refuses, --export refuses: one validator (its NaN check aside, which export warns of).
  require_sound_structure(info, o.cache);
  const std::string dir = without_trailing_slashes(o.dir);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) throw Error(Exit::cant_create, o.dir, "exists (remove it first)");
  std::vector<std::unique_ptr<source::Column>> emb;
  ExportResult r;
  r.dir = o.dir;
  r.rows = info.rows;
  for (const auto& e : info.embeddings) {
    emb.push_back(source::open_column(o.cache, "/embeddings/" + e.name));
    if (o.normalize && !is_float(emb.back()->info().dtype))
      throw Error(Exit::data, o.cache, "--normalize: embeddings '" + e.name + "' are not floating point");
    r.encoders.push_back(e.name);
  }
  auto keys = info.keys_dtype ? source::open_column(o.cache, "/keys") : nullptr;
  // --labels NAME: one the cache has (64 otherwise, also for a cache without labels)
  const LabelInfo* label_info = info.labels || !o.labels.empty() ? &label_column(info, o.labels, "--labels") : nullptr;
  auto labels = label_info ? source::open_column(o.cache, label_info->dataset) : nullptr;
  std::set<int64_t> skipped;
  for (const auto& [row, why] : read_skipped(o.cache)) skipped.insert(row);
  TempDir tmp(dir);
  r.stale_removed = tmp.removed_stale();
  for (const auto& name : r.encoders) tmp.make_dir(name);
  tmp.make_dir("metadata");
  const int64_t files = (info.rows + o.rows_per_file - 1) / o.rows_per_file;
  for (int64_t a = 0; a < info.rows; a += o.rows_per_file, ++r.files) {
    const int64_t b = std::min(info.rows, a + o.rows_per_file);
    for (std::size_t i = 0; i < emb.size(); ++i)
      r.nonfinite_rows +=
          write_npy(*emb[i], a, b,
                    tmp.path() + "/" + r.encoders[i] + "/" + export_file_name(r.encoders[i], r.files, files, ".npy"),
                    o.normalize);
    const auto k = keys ? json_values(*keys, a, b) : std::vector<Json>{};
    const auto l = labels ? json_values(*labels, a, b) : std::vector<Json>{};
    std::string lines;
    for (int64_t row = a; row < b; ++row) {
      const auto j = static_cast<std::size_t>(row - a);
      Json m{{"row", row}, {"key", keys ? k[j] : Json(info.row_start + row)}};
      if (labels) m["label"] = l[j];
      if (labels && l[j].is_number_integer())
        if (auto name = class_name(*label_info, l[j].get<int64_t>())) m["label_name"] = *name;
      if (skipped.count(row)) m["skipped"] = true;
      lines += json_text(m) + '\n';
    }
    files::TempFile meta(tmp.path() + "/metadata/" + export_file_name("metadata", r.files, files, ".jsonl"));
    meta.write_all(lines.data(), lines.size());
    meta.commit();
  }
  tmp.publish();
  return r;
}

}  // namespace traincache::io::cache
