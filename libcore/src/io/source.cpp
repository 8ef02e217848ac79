#include "traincache/io/source.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>

#include "file_source.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/interrupt.h"
#include "traincache/io/h5.h"
#include "traincache/io/npy.h"
#include "traincache/io/row_digest.h"
#include "traincache/slab/sharing.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::io::source {

namespace {

constexpr const char* kShmScheme = "shm:";

bool ends_with_nocase(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  return std::equal(suffix.rbegin(), suffix.rend(), s.rbegin(),
                    [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

// An HDF5 dataset (HDF5 is built thread-safe here: reads from several threads serialise inside it).
class Hdf5Column : public Column {
 public:
  Hdf5Column(const std::string& path, const std::string& name) : Column(Kind::hdf5, path) {
    file_ = h5::open_file(path);
    dset_ = h5::open_dataset(file_.get(), path, name, true);
    h5info_ = h5::describe(dset_.get(), name);
    info_.name = name;
    info_.shape = h5info_.shape;
    info_.dtype = h5info_.dtype;
    if (info_.dtype == DType::f16) half_ = h5::float16_type();
  }

  void read(int64_t start, int64_t count, void* out) const override {
    if (info_.dtype == DType::string || info_.dtype == DType::other)
      throw Error(Exit::data, path(), "dataset '" + info_.name + "' is not numeric");
    check_range(start, count);
    hid_t mtype = info_.dtype == DType::f16 ? half_.get() : h5::native_type(info_.dtype);
    h5::read_rows(dset_.get(), info_.name, start, count, mtype, out);
  }

  void digest(int64_t a, int64_t b, ContentHash& h) const override { hash_rows(dset_.get(), h5info_, a, b, h); }

  // Numbers whose native type is the one read() reads them in give both digests from one read.
  void digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const override {
    if (info_.ragged || info_.dtype == DType::string || info_.dtype == DType::other || info_.dtype == DType::f16)
      return Column::digest_rows(a, b, h, rows);
    h5::Id ftype(H5Dget_type(dset_.get()));
    h5::Id native(H5Tget_native_type(ftype.get(), H5T_DIR_ASCEND));
    if (H5Tequal(native.get(), h5::native_type(info_.dtype)) <= 0) return Column::digest_rows(a, b, h, rows);
    hash_rows(dset_.get(), h5info_, a, b, h, 8 << 20, rows);
  }

  hid_t hdf5_dataset() const override { return dset_.get(); }

  // A dataset of strings (variable or fixed length; fixed ones lose their NUL or space padding),
  // rows of several strings one after another.
  std::vector<std::string> read_strings(int64_t start, int64_t count) const override {
    if (info_.dtype != DType::string)
      throw Error(Exit::data, path(), "dataset '" + info_.name + "' is not a dataset of strings");
    check_range(start, count);
    const int64_t n = count * info_.row_elements();
    h5::Id ftype(H5Dget_type(dset_.get()));
    h5::Id mtype(H5Tcopy(ftype.get()));
    std::vector<std::string> out;
    out.reserve(static_cast<std::size_t>(n));
    if (h5info_.vlen_string) {
      std::vector<char*> p(static_cast<std::size_t>(n), nullptr);
      h5::read_rows(dset_.get(), info_.name, start, count, mtype.get(), p.data());
      for (char* c : p) out.emplace_back(c ? c : "");
      hsize_t dims[1] = {static_cast<hsize_t>(n)};
      h5::Id space(H5Screate_simple(1, dims, nullptr));
      H5Dvlen_reclaim(mtype.get(), space.get(), H5P_DEFAULT, p.data());
      return out;
    }
    const std::size_t w = h5info_.type_size;
    std::vector<char> buf(w * static_cast<std::size_t>(n));
    h5::read_rows(dset_.get(), info_.name, start, count, mtype.get(), buf.data());
    for (int64_t i = 0; i < n; ++i) {
      std::string v(buf.data() + i * w, w);
      v.erase(v.find_last_not_of(std::string("\0 ", 2)) + 1);
      out.push_back(std::move(v));
    }
    return out;
  }

 protected:
  void read_runs(const std::vector<std::pair<int64_t, int64_t>>& runs, void* out) const override {
    if (info_.dtype == DType::string || info_.dtype == DType::other)
      throw Error(Exit::data, path(), "dataset '" + info_.name + "' is not numeric");
    hid_t mtype = info_.dtype == DType::f16 ? half_.get() : h5::native_type(info_.dtype);
    std::call_once(map_once_, [&] { map_ = h5::RowMap::of(file_.get(), dset_.get(), mtype); });
    if (!map_) return h5::read_row_runs(dset_.get(), info_.name, runs, mtype, out);
    if (runs.size() > 1)  // scattered over a file the page cache may not hold: start every read now
      for (const auto& [first, count] : runs) map_->advise(first, count);
    char* dst = static_cast<char*>(out);
    for (const auto& [first, count] : runs) {
      map_->read(first, count, dst, path());
      dst += static_cast<std::size_t>(count) * info_.row_bytes();
    }
  }

 private:
  h5::Id file_, dset_, half_;
  h5::DatasetInfo h5info_;
  mutable std::once_flag map_once_;
  mutable std::optional<h5::RowMap> map_;  // direct reads of scattered rows, where the layout allows
};

// A fixed-layout slab, attached read-only; every row read must be cached.
class SlabColumn : public Column {
 public:
  SlabColumn(const std::string& path, bool trust_owner)
      : Column(Kind::shm, path), slab_(slab::Slab::attach(path.substr(std::strlen(kShmScheme)), false)) {
    auto si = slab_.info();  // its uid is the mapped object's owner (fstat of the descriptor mapped)
    slab::require_own_slab(si, path, trust_owner, "--trust-slab-owner to read it");
    info_.name = path;
    info_.dtype = si.dtype;
    info_.shape = {static_cast<int64_t>(si.length)};
    info_.ragged = si.layout == slab::Layout::variable;
    if (info_.ragged && !is_integer(si.dtype))
      throw Error(
          Exit::data, path,
          std::string("a variable-layout input slab must hold integer token sequences, not ") + dtype_name(si.dtype));
    if (!info_.ragged)
      for (auto d : si.dims) info_.shape.push_back(static_cast<int64_t>(d));
  }

  void read(int64_t start, int64_t count, void* out) const override {
    if (info_.ragged)
      throw Error(Exit::data, path(), "holds sequences of varying length: read them as token sequences");
    check_range(start, count);
    const std::size_t row = info_.row_bytes();
    auto* dst = static_cast<char*>(out);
    for (int64_t i = 0; i < count; ++i) {
      auto v = slab_.view(static_cast<uint64_t>(start + i));
      if (!v)
        throw Error(Exit::data, info_.name,
                    "index " + std::to_string(start + i) + " is not cached (shm-cache fill it first)");
      std::memcpy(dst + static_cast<std::size_t>(i) * row, v.data, std::min(row, v.bytes));
    }
  }

  void read_ragged(int64_t start, int64_t count, std::vector<int64_t>& values,
                   std::vector<int64_t>& offsets) const override {
    if (!info_.ragged) Column::read_ragged(start, count, values, offsets);
    check_range(start, count);
    const std::size_t esize = dtype_size(info_.dtype);
    values.clear();
    offsets.assign(1, 0);
    for (int64_t i = start; i < start + count; ++i) {
      auto v = slab_.view(static_cast<uint64_t>(i));
      if (!v)
        throw Error(Exit::data, info_.name, "index " + std::to_string(i) + " is not cached (shm-cache fill it first)");
      const std::size_t n = v.bytes / esize;
      const std::size_t at = values.size();
      values.resize(at + n);
      to_int64(info_.dtype, v.data, values.data() + at, n);
      offsets.push_back(static_cast<int64_t>(values.size()));
    }
  }

  void digest(int64_t a, int64_t b, ContentHash& h) const override { hash_slab_rows(slab_, a, b, h); }

 private:
  slab::Slab slab_;
};

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::hdf5:
      return "hdf5";
    case Kind::shm:
      return "shm";
    case Kind::npy:
      return "npy";
    case Kind::npz:
      return "npz";
    case Kind::image_folder:
      return "image-folder";
    case Kind::manifest:
      return "manifest";
    case Kind::tar:
      return "tar";
  }
  return "?";
}

const Choices<LabelOrder>& label_order_choices() {
  static const Choices<LabelOrder> c{{LabelOrder::sorted, "sorted"}, {LabelOrder::first_seen, "first-seen"}};
  return c;
}

Kind kind_of(const std::string& path) {
  if (path.rfind(kShmScheme, 0) == 0) return Kind::shm;
  if (ends_with_nocase(path, ".npy")) return Kind::npy;
  if (ends_with_nocase(path, ".npz")) return Kind::npz;
  for (const char* ext : {".csv", ".tsv", ".jsonl", ".ndjson"})
    if (ends_with_nocase(path, ext)) return Kind::manifest;
  for (const char* ext : {".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst"})
    if (ends_with_nocase(path, ext)) return Kind::tar;
  if (path.find('{') != std::string::npos && path.back() == '}') {  // "{a.tar,b.tar}"
    try {
      const auto names = brace_expansion(path);
      if (names.size() > 1 && kind_of(names.front()) == Kind::tar) return Kind::tar;
    } catch (const Error&) {
    }
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Kind::image_folder;
  return Kind::hdf5;
}

std::string recorded_path(const std::string& path) {
  if (path.empty() || kind_of(path) == Kind::shm) return path;
  if (kind_of(path) != Kind::tar || path[0] == '/' || ::access(path.c_str(), F_OK) == 0)
    return files::absolute_path(path);
  std::string cwd(PATH_MAX, '\0');
  if (!::getcwd(cwd.data(), cwd.size())) return path;
  cwd.resize(std::strlen(cwd.c_str()));
  return cwd + "/" + (path.rfind("./", 0) == 0 ? path.substr(2) : path);
}

bool names_own_file(const std::string& name) {
  Kind k = kind_of(name);
  return k == Kind::npy || k == Kind::shm;
}

namespace {

std::string default_column_of(Kind kind, const std::string& path) {
  switch (kind) {
    case Kind::npy:
      return std::filesystem::path(path).stem().string();
    case Kind::shm:
      return path;
    case Kind::image_folder:
      return "image";
    default:
      return "";
  }
}

std::string default_keys_of(Kind kind) {
  switch (kind) {
    case Kind::image_folder:
      return "path";
    case Kind::tar:
      return "__key__";
    default:
      return "";
  }
}

}  // namespace

Resolved resolve(const std::string& path) {
  Resolved r;
  r.path = path;
  r.kind = kind_of(path);
  r.column = default_column_of(r.kind, path);
  r.labels = r.kind == Kind::image_folder ? "label" : "";
  r.keys = default_keys_of(r.kind);
  return r;
}

std::string default_column(const std::string& path) { return default_column_of(kind_of(path), path); }

std::string default_labels(const std::string& path) { return resolve(path).labels; }

std::string label_column_name(const std::string& source) {
  if (names_own_file(source) && source.rfind("shm:", 0) != 0) return std::filesystem::path(source).stem().string();
  const std::size_t slash = source.find_last_of('/');
  return slash == std::string::npos || slash + 1 == source.size() ? source : source.substr(slash + 1);
}
std::string default_keys(const std::string& path) { return default_keys_of(kind_of(path)); }

int64_t ColumnInfo::row_elements() const {
  int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::size_t ColumnInfo::row_bytes() const { return static_cast<std::size_t>(row_elements()) * dtype_size(dtype); }

void Column::check_range(int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start + count > info_.rows())
    throw Error(Exit::internal, info_.name,
                "rows [" + std::to_string(start) + ", " + std::to_string(start + count) + ") out of range (" +
                    std::to_string(info_.rows()) + " rows)");
}

void Column::read_runs(const std::vector<std::pair<int64_t, int64_t>>& runs, void* out) const {
  const std::size_t row = info_.row_bytes();
  char* dst = static_cast<char*>(out);
  for (const auto& [first, count] : runs) {
    read(first, count, dst);
    dst += static_cast<std::size_t>(count) * row;
  }
}

void Column::read_rows(const std::vector<int64_t>& rows, void* out) const {
  if (rows.empty()) return;
  const bool ascending = std::is_sorted(rows.begin(), rows.end(), std::less_equal<int64_t>()) &&
                         std::adjacent_find(rows.begin(), rows.end()) == rows.end();
  std::vector<int64_t> distinct;
  if (!ascending) {
    distinct = rows;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  }
  const std::vector<int64_t>& want = ascending ? rows : distinct;
  for (int64_t r : {want.front(), want.back()}) check_range(r, 1);
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t r : want) {
    if (!runs.empty() && runs.back().first + runs.back().second == r)
      ++runs.back().second;
    else
      runs.emplace_back(r, 1);
  }
  const std::size_t row = info_.row_bytes();
  if (ascending) return read_runs(runs, out);
  std::vector<char> buf(want.size() * row);
  read_runs(runs, buf.data());
  char* dst = static_cast<char*>(out);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto at = static_cast<std::size_t>(std::lower_bound(want.begin(), want.end(), rows[i]) - want.begin());
    std::memcpy(dst + i * row, buf.data() + at * row, row);
  }
}

void Column::digest(int64_t a, int64_t b, ContentHash& h) const { digest_numbers(a, b, h, nullptr); }

void Column::digest_numbers(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const {
  h.update(info_.name + '\0' + dtype_name(info_.dtype) + '\0');
  const std::size_t row = std::max<std::size_t>(1, info_.row_bytes());
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / row));
  std::vector<char> buf;
  for (int64_t s = a; s < b; s += block) {
    stop_if_interrupted("digesting the input (nothing was written)");
    int64_t n = std::min(block, b - s);
    buf.resize(static_cast<std::size_t>(n) * row);
    read(s, n, buf.data());
    h.update(buf.data(), buf.size());
    for (int64_t r = 0; rows && r < n; ++r) {
      ContentHash own;
      own.update(buf.data() + r * row, row);
      rows[s - a + r] = own.digest();
    }
  }
}

void Column::feed_rows(int64_t a, int64_t b, ContentHash* hashes) const {
  const bool numbers = !preprocess() && !info_.ragged && info_.dtype != DType::string && info_.dtype != DType::other;
  if (!numbers) {
    for (int64_t r = a; r < b; ++r) {
      if ((r - a) % 256 == 0) stop_if_interrupted("digesting the input's rows (nothing was written)");
      digest(r, r + 1, hashes[r - a]);
    }
    return;
  }
  const std::size_t row = std::max<std::size_t>(1, info_.row_bytes());
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / row));
  std::vector<char> buf;
  for (int64_t s = a; s < b; s += block) {
    stop_if_interrupted("digesting the input's rows (nothing was written)");
    const int64_t n = std::min(block, b - s);
    buf.resize(static_cast<std::size_t>(n) * row);
    read(s, n, buf.data());
    for (int64_t r = 0; r < n; ++r) hashes[s - a + r].update(buf.data() + r * row, row);
  }
}

void Column::digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const {
  digest(a, b, h);
  constexpr int64_t kPart = 4096;  // the hashes' states held at once (~600 bytes each)
  for (int64_t s = a; s < b; s += kPart) {
    const int64_t e = std::min(b, s + kPart);
    std::vector<ContentHash> hashes(static_cast<std::size_t>(e - s));
    feed_rows(s, e, hashes.data());
    for (int64_t r = s; r < e; ++r) rows[r - a] = hashes[static_cast<std::size_t>(r - s)].digest();
  }
}

bool Column::digest_rows_and_files(int64_t a, int64_t b, ContentHash& h, Digest128* rows, Digest128*) const {
  digest_rows(a, b, h, rows);
  return false;
}

void Column::read_ragged(int64_t, int64_t, std::vector<int64_t>&, std::vector<int64_t>&) const {
  throw Error(Exit::data, path_, "'" + info_.name + "' does not hold sequences of varying length");
}

std::vector<std::string> Column::read_strings(int64_t, int64_t) const {
  throw Error(Exit::data, path_, "'" + info_.name + "' holds numbers, not strings");
}

void Column::read_pixels(int64_t, int64_t, uint8_t*) const {
  throw Error(Exit::internal, path_, "'" + info_.name + "' is not a column of images");
}

EncodedImage Column::read_encoded(int64_t) const {
  throw Error(Exit::internal, path_, "'" + info_.name + "' is not a column of images");
}

void Column::pixels_of(const EncodedImage&, int64_t, uint8_t*) const {
  throw Error(Exit::internal, path_, "'" + info_.name + "' is not a column of images");
}

const std::vector<std::string>& Column::label_names() const {
  static const std::vector<std::string> none;
  return none;
}

namespace {

// gathered(): a view of some of base's rows. Every call becomes calls on base with base's rows,
// one per run of consecutive rows.
class GatheredColumn final : public Column {
 public:
  GatheredColumn(std::shared_ptr<const Column> base, std::vector<int64_t> rows)
      : Column(base->kind(), base->path()), base_(std::move(base)), rows_(std::move(rows)) {
    info_ = base_->info();
    info_.shape[0] = static_cast<int64_t>(rows_.size());
    for (int64_t r : rows_)
      if (r < 0 || r >= base_->info().rows()) throw Error(Exit::internal, info_.name, "gathered row out of range");
  }

  void read(int64_t start, int64_t count, void* out) const override {
    check_range(start, count);
    const std::size_t row = info_.row_bytes();
    char* dst = static_cast<char*>(out);
    for (const auto& [first, n] : runs(start, count)) {
      base_->read(first, n, dst);
      dst += static_cast<std::size_t>(n) * row;
    }
  }
  void read_ragged(int64_t start, int64_t count, std::vector<int64_t>& values,
                   std::vector<int64_t>& offsets) const override {
    check_range(start, count);
    values.clear();
    offsets.assign(1, 0);
    for (const auto& [first, n] : runs(start, count)) {
      std::vector<int64_t> v, o;
      base_->read_ragged(first, n, v, o);
      for (std::size_t i = 1; i < o.size(); ++i) offsets.push_back(static_cast<int64_t>(values.size()) + o[i]);
      values.insert(values.end(), v.begin(), v.end());
    }
  }
  std::vector<std::string> read_strings(int64_t start, int64_t count) const override {
    check_range(start, count);
    std::vector<std::string> out;
    for (const auto& [first, n] : runs(start, count))
      for (auto& s : base_->read_strings(first, n)) out.push_back(std::move(s));
    return out;
  }
  void read_pixels(int64_t start, int64_t count, uint8_t* out) const override {
    check_range(start, count);
    const auto row = static_cast<std::size_t>(info_.row_elements());
    for (const auto& [first, n] : runs(start, count)) {
      base_->read_pixels(first, n, out);
      out += static_cast<std::size_t>(n) * row;
    }
  }
  EncodedImage read_encoded(int64_t row) const override { return base_->read_encoded(at(row)); }
  void pixels_of(const EncodedImage& e, int64_t row, uint8_t* out) const override { base_->pixels_of(e, at(row), out); }
  const std::vector<std::string>& label_names() const override { return base_->label_names(); }
  const image::Spec* preprocess() const override { return base_->preprocess(); }
  int64_t utf8_replaced() const override { return base_->utf8_replaced(); }
  std::string warning() const override { return base_->warning(); }

 private:
  int64_t at(int64_t row) const {
    check_range(row, 1);
    return rows_[static_cast<std::size_t>(row)];
  }
  // Rows [start, start + count) of the view as runs of consecutive rows of base, in the view's order.
  std::vector<std::pair<int64_t, int64_t>> runs(int64_t start, int64_t count) const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t i = start; i < start + count; ++i) {
      const int64_t r = rows_[static_cast<std::size_t>(i)];
      if (!out.empty() && out.back().first + out.back().second == r)
        ++out.back().second;
      else
        out.emplace_back(r, 1);
    }
    return out;
  }

  std::shared_ptr<const Column> base_;
  std::vector<int64_t> rows_;
};

}  // namespace

std::shared_ptr<const Column> gathered(std::shared_ptr<const Column> base, std::vector<int64_t> rows) {
  return std::make_shared<GatheredColumn>(std::move(base), std::move(rows));
}

std::unique_ptr<Column> open_column(const std::string& path, const std::string& name, const FileOptions& files,
                                    Role role) {
  return open_column(resolve(path), name, files, role);
}

std::unique_ptr<Column> open_column(const Resolved& input, const std::string& name, const FileOptions& files,
                                    Role role) {
  const std::string& path = input.path;
  if (!name.empty() && names_own_file(name) && name != path) return open_column(name, "", files, role);
  switch (input.kind) {
    case Kind::shm:
      if (!name.empty() && name != path)
        throw Error(Exit::usage, path, "a slab holds one array; '" + name + "' names no other");
      return std::make_unique<SlabColumn>(path, files.trust_slab_owner);
    case Kind::npy:
      if (!name.empty() && name != path && name != input.column)
        throw Error(Exit::usage, path, "a .npy file holds one array; '" + name + "' names no other");
      return npy::open_npy(path);
    case Kind::npz:
      if (name.empty()) throw Error(Exit::usage, path, "name the member of the .npz archive to read");
      return npy::open_npz_member(path, name);
    case Kind::hdf5:
      if (name.empty()) throw Error(Exit::usage, path, "name the dataset of the HDF5 file to read");
      return std::make_unique<Hdf5Column>(path, name);
    case Kind::image_folder:
      return open_folder_column(path, name.empty() ? "image" : name, files);
    case Kind::manifest:
      if (name.empty()) throw Error(Exit::usage, path, "name the field of the manifest to read");
      return open_manifest_column(path, name, role, files);
    case Kind::tar:
      return open_tar_column(path, name, role, files);
  }
  throw Error(Exit::internal, path, "unknown source kind");
}

void require_numeric_input(const ColumnInfo& info, const std::string& file) {
  if (info.dtype == DType::string || info.dtype == DType::other)
    throw Error(Exit::data, file,
                "dataset '" + info.name + "' has dtype " + dtype_name(info.dtype) +
                    "; an encoder input must be integer or floating point");
  if (info.shape.empty())
    throw Error(Exit::data, file, "dataset '" + info.name + "' is a scalar; expected [rows, ...]");
}

}  // namespace traincache::io::source
