#include "traincache/io/h5.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>

namespace traincache::io::h5 {

namespace {
std::atomic<bool> g_print_stack{false};
}

void skip_exit_cleanup() { H5dont_atexit(); }

void require_thread_safe() {
  hbool_t safe = 0;
  if (H5is_library_threadsafe(&safe) < 0 || !safe)
    throw Error(Exit::unavailable, "HDF5",
                "the library loaded at run time is not thread-safe; traincache reads it from several threads");
}

void set_verbose(bool print_stack) {
  g_print_stack = print_stack;
  if (print_stack)
    H5Eset_auto2(H5E_DEFAULT, reinterpret_cast<H5E_auto2_t>(H5Eprint2), stderr);
  else
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

namespace {
// HDF5's error-stack settings are per thread in thread-safe builds: configure each thread once.
thread_local bool t_configured = false;
void init() {
  if (!t_configured) {
    t_configured = true;
    set_verbose(g_print_stack);
  }
}

herr_t close_any(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      return H5Fclose(id);
    case H5I_GROUP:
      return H5Gclose(id);
    case H5I_DATASET:
      return H5Dclose(id);
    case H5I_DATASPACE:
      return H5Sclose(id);
    case H5I_DATATYPE:
      return H5Tclose(id);
    case H5I_ATTR:
      return H5Aclose(id);
    case H5I_GENPROP_LST:
      return H5Pclose(id);
    default:
      return H5Idec_ref(id);
  }
}

herr_t walk_cb(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err->desc) *out = err->desc;  // innermost: the most specific cause
  return 0;
}
}  // namespace

Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Id::reset() {
  if (id_ >= 0) close_any(id_);
  id_ = H5I_INVALID_HID;
}

std::string last_error() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &msg);
  for (auto& c : msg) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // HDF5 1.12+ words its innermost messages after its asynchronous API ("unable to synchronously
  // open file"); the word says nothing to a user and the messages stay those of 1.10.
  const std::string sync = "synchronously ";
  for (auto at = msg.find(sync); at != std::string::npos; at = msg.find(sync, at)) msg.erase(at, sync.size());
  return msg;
}

hid_t check(hid_t status, Exit code, const std::string& subject, const std::string& what) {
  if (status < 0) {
    std::string detail = last_error();
    throw Error(code, subject, detail.empty() ? what : what + ": " + detail);
  }
  return status;
}

Id open_file(const std::string& path, bool writable) {
  init();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(Exit::no_input, path, errno_text(errno));
  if (S_ISDIR(st.st_mode)) throw Error(Exit::no_input, path, "is a directory");
  if (!S_ISREG(st.st_mode)) throw Error(Exit::no_input, path, "not a regular file");
  htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw Error(Exit::no_input, path, errno_text(errno));
    std::fclose(f);
    throw Error(Exit::data, path, "not an HDF5 file");
  }
  hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  check(id, Exit::data, path, "cannot open HDF5 file (corrupt?)");
  return Id(id);
}

namespace {

// File access for new files: object headers, B-trees and heaps in the HDF5 1.8+ encodings, which
// carry checksums, so a damaged byte in a cache's metadata is a clean "corrupt" error on reading
// instead of a value HDF5 trusts (docs/design.md, "Faults"). Readable by HDF5 1.8 and later.
Id checksummed_fapl() {
  Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (!fapl || H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0)
    throw Error(Exit::internal, "HDF5", "cannot set the file format bounds");
  return fapl;
}

}  // namespace

Id create_file(const std::string& path) {
  init();
  Id fapl = checksummed_fapl();
  Id fcpl = untimed_create_plist(H5P_FILE_CREATE);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  check(id, Exit::cant_create, path, "cannot create HDF5 file");
  return Id(id);
}

Id create_temp_file(files::TempPath& tmp) {
  init();
  for (int tries = 0; tries < 100; ++tries) {
    struct stat st;
    if (lstat(tmp.path().c_str(), &st) == 0) {
      tmp.rename_candidate();
      continue;
    }
    Id fapl = checksummed_fapl();
    Id fcpl = untimed_create_plist(H5P_FILE_CREATE);
    hid_t id = H5Fcreate(tmp.path().c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get());
    if (id >= 0) return Id(id);
    if (lstat(tmp.path().c_str(), &st) == 0 && tries < 99) {  // someone else's file appeared
      tmp.rename_candidate();
      continue;
    }
    check(id, Exit::cant_create, tmp.dest(), "cannot create a temporary file beside it");
  }
  tmp.forget();
  throw Error(Exit::cant_create, tmp.dest(), "cannot find a free temporary name");
}

void close_file(Id& file, const std::string& path) {
  hid_t id = file.get();
  file.release();
  if (id < 0) return;
  errno = 0;
  herr_t flushed = H5Fflush(id, H5F_SCOPE_LOCAL);
  int err = errno;
  std::string detail = flushed < 0 ? last_error() : "";
  if (flushed < 0 && (err == ENOSPC || err == EDQUOT || err == EIO)) detail += " (" + errno_text(err) + ")";
  herr_t closed = H5Fclose(id);
  if (closed < 0 && detail.empty()) detail = last_error();
  if (flushed < 0 || closed < 0)
    throw Error(Exit::io, path, "cannot write the file" + (detail.empty() ? "" : ": " + detail));
}

bool exists(hid_t loc, const std::string& path) {
  std::size_t pos = 0;
  while (true) {
    std::size_t next = path.find('/', pos);
    std::string part = path.substr(0, next);
    if (!part.empty() && part != "/") {
      if (H5Lexists(loc, part.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return !path.empty();
}

int64_t DatasetInfo::row_elements() const {
  int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// HDF5 1.12 gave H5Oget_info a new struct (H5O_info2_t) and renumbered the calls; 1.10 has v1/v2.
#if H5_VERSION_GE(1, 12, 0)
using ObjectInfo = H5O_info2_t;
#define TC_H5O_GET_INFO_BY_NAME H5Oget_info_by_name3
#define TC_H5O_GET_INFO H5Oget_info3
#else
using ObjectInfo = H5O_info_t;  // 1.10: the v1 struct, which H5Oget_info*2 fill
#define TC_H5O_GET_INFO_BY_NAME H5Oget_info_by_name2
#define TC_H5O_GET_INFO H5Oget_info2
#endif

H5O_type_t object_type(hid_t loc, const std::string& path) {
  ObjectInfo info;
  if (TC_H5O_GET_INFO_BY_NAME(loc, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}

hsize_t attribute_count(hid_t object) {
  ObjectInfo info;
  if (TC_H5O_GET_INFO(object, &info, H5O_INFO_NUM_ATTRS) < 0) return 0;
  return info.num_attrs;
}

Id open_dataset(hid_t file, const std::string& file_path, const std::string& name, bool direct_unfiltered) {
  init();
  if (!exists(file, name)) throw Error(Exit::data, file_path, "no dataset '" + name + "'");
  if (object_type(file, name) != H5O_TYPE_DATASET)
    throw Error(Exit::data, file_path, "'" + name + "' is not a dataset");
  hid_t id = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  check(id, Exit::data, file_path, "cannot open dataset '" + name + "'");
  Id dset(id);
  if (!direct_unfiltered) return dset;
  Id dcpl(H5Dget_create_plist(dset.get()));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_nfilters(dcpl.get()) != 0) return dset;
  dset = Id();  // closed first: a dataset open twice shares the first opening's chunk cache
  Id dapl(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(dapl.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  id = H5Dopen2(file, name.c_str(), dapl.get());
  check(id, Exit::data, file_path, "cannot open dataset '" + name + "'");
  return Id(id);
}

DatasetInfo describe(hid_t dset, const std::string& name) {
  DatasetInfo info;
  info.name = name;
  Id space(H5Dget_space(dset));
  int nd = H5Sget_simple_extent_ndims(space.get());
  if (nd < 0) throw Error(Exit::data, name, "unreadable dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  // Sizes read from a file are checked before anything multiplies them: the element count must
  // fit 63 bits (a forged shape would otherwise wrap into a small allocation).
  int64_t elements = 1;
  for (auto d : dims) {
    if (d > static_cast<hsize_t>(INT64_MAX) || __builtin_mul_overflow(elements, static_cast<int64_t>(d), &elements))
      throw Error(Exit::data, name, "its shape does not fit 63 bits (corrupt file?)");
    info.shape.push_back(static_cast<int64_t>(d));
  }
  Id type(H5Dget_type(dset));
  info.type_size = H5Tget_size(type.get());
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      bool is_signed = H5Tget_sign(type.get()) == H5T_SGN_2;
      switch (info.type_size) {
        case 1:
          info.dtype = is_signed ? DType::i8 : DType::u8;
          break;
        case 2:
          info.dtype = is_signed ? DType::i16 : DType::u16;
          break;
        case 4:
          info.dtype = is_signed ? DType::i32 : DType::u32;
          break;
        case 8:
          info.dtype = is_signed ? DType::i64 : DType::u64;
          break;
        default:
          info.dtype = DType::other;
      }
      break;
    }
    case H5T_FLOAT:
      info.dtype = info.type_size == 2   ? DType::f16
                   : info.type_size == 4 ? DType::f32
                   : info.type_size == 8 ? DType::f64
                                         : DType::other;
      break;
    case H5T_STRING:
      info.dtype = DType::string;
      info.vlen_string = H5Tis_variable_str(type.get()) > 0;
      break;
    default:
      info.dtype = DType::other;
  }
  return info;
}

hid_t native_type(DType t) {
  switch (t) {
    case DType::u8:
      return H5T_NATIVE_UINT8;
    case DType::i8:
      return H5T_NATIVE_INT8;
    case DType::u16:
      return H5T_NATIVE_UINT16;
    case DType::i16:
      return H5T_NATIVE_INT16;
    case DType::u32:
      return H5T_NATIVE_UINT32;
    case DType::i32:
      return H5T_NATIVE_INT32;
    case DType::u64:
      return H5T_NATIVE_UINT64;
    case DType::i64:
      return H5T_NATIVE_INT64;
    case DType::f32:
      return H5T_NATIVE_FLOAT;
    case DType::f64:
      return H5T_NATIVE_DOUBLE;
    default:
      throw Error(Exit::internal, "", std::string("no native HDF5 type for ") + dtype_name(t));
  }
}

Id float16_type() {
  Id t(H5Tcopy(H5T_IEEE_F32LE));
  // sign bit 15, exponent at 10 (5 bits), mantissa at 0 (10 bits), bias 15.
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_precision(t.get(), 16);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

namespace {
Id row_selection(hid_t dset, int64_t start, int64_t count, Id* mem_space) {
  Id space(H5Dget_space(dset));
  int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<hsize_t> off(dims.size(), 0), cnt = dims;
  off[0] = static_cast<hsize_t>(start);
  cnt[0] = static_cast<hsize_t>(count);
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
  *mem_space = Id(H5Screate_simple(nd, cnt.data(), nullptr));
  return space;
}
}  // namespace

void read_rows(hid_t dset, const std::string& what, int64_t start, int64_t count, hid_t mem_type, void* buf) {
  init();
  if (count == 0) return;
  Id mem;
  Id file_space = row_selection(dset, start, count, &mem);
  check(H5Dread(dset, mem_type, mem.get(), file_space.get(), H5P_DEFAULT, buf), Exit::data, what,
        "cannot read rows " + std::to_string(start) + ".." + std::to_string(start + count));
}

void read_row_runs(hid_t dset, const std::string& what, const std::vector<std::pair<int64_t, int64_t>>& runs,
                   hid_t mem_type, void* buf) {
  init();
  Id space(H5Dget_space(dset));
  const int nd = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<hsize_t> off(dims.size(), 0), cnt = dims;
  hsize_t total = 0;
  for (const auto& [first, count] : runs) {
    if (count == 0) continue;
    off[0] = static_cast<hsize_t>(first);
    cnt[0] = static_cast<hsize_t>(count);
    check(H5Sselect_hyperslab(space.get(), total == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, off.data(), nullptr, cnt.data(),
                              nullptr),
          Exit::internal, what, "cannot select rows");
    total += cnt[0];
  }
  if (total == 0) return;
  cnt[0] = total;
  Id mem(H5Screate_simple(nd, cnt.data(), nullptr));
  check(H5Dread(dset, mem_type, mem.get(), space.get(), H5P_DEFAULT, buf), Exit::data, what,
        "cannot read " + std::to_string(total) + " rows");
}

std::optional<RowMap> RowMap::of(hid_t file, hid_t dset, hid_t mem_type) {
  init();
  unsigned intent = 0;
  Id fapl(H5Fget_access_plist(file));
  if (H5Fget_intent(file, &intent) < 0 || (intent & H5F_ACC_RDWR) || H5Pget_driver(fapl.get()) != H5FD_SEC2)
    return std::nullopt;
  Id ftype(H5Dget_type(dset));
  if (H5Tequal(ftype.get(), mem_type) <= 0) return std::nullopt;
  Id space(H5Dget_space(dset));
  const int nd = H5Sget_simple_extent_ndims(space.get());
  if (nd < 1) return std::nullopt;
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  RowMap m;
  m.row_ = H5Tget_size(ftype.get());
  for (int i = 1; i < nd; ++i) m.row_ *= dims[static_cast<std::size_t>(i)];
  void* handle = nullptr;
  if (m.row_ == 0 || H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) return std::nullopt;
  m.fd_ = *static_cast<int*>(handle);
  Id dcpl(H5Dget_create_plist(dset));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (H5Pget_nfilters(dcpl.get()) != 0) return std::nullopt;
  if (layout == H5D_CONTIGUOUS) {
    haddr_t at = H5Dget_offset(dset);
    if (at == HADDR_UNDEF) return std::nullopt;
    m.per_chunk_ = std::max<int64_t>(1, static_cast<int64_t>(dims[0]));
    m.base_.push_back(at);
    return m;
  }
  if (layout != H5D_CHUNKED) return std::nullopt;
  std::vector<hsize_t> chunk(static_cast<std::size_t>(nd));
  if (H5Pget_chunk(dcpl.get(), nd, chunk.data()) != nd) return std::nullopt;
  for (int i = 1; i < nd; ++i)
    if (chunk[static_cast<std::size_t>(i)] != dims[static_cast<std::size_t>(i)]) return std::nullopt;
  m.per_chunk_ = static_cast<int64_t>(chunk[0]);
  std::vector<hsize_t> offset(static_cast<std::size_t>(nd), 0);
  for (hsize_t r = 0; r < dims[0]; r += chunk[0]) {
    offset[0] = r;
    unsigned mask = 0;
    haddr_t at = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info_by_coord(dset, offset.data(), &mask, &at, &bytes) < 0 || at == HADDR_UNDEF ||
        bytes < chunk[0] * m.row_)
      return std::nullopt;  // an unallocated chunk reads as fill values: HDF5's business
    m.base_.push_back(at);
  }
  return m;
}

// Calls `piece(file_offset, bytes)` for each part of rows [first, first + count) that lies in one chunk.
template <class F>
void RowMap::pieces(int64_t first, int64_t count, F&& piece) const {
  while (count > 0) {
    const int64_t c = first / per_chunk_, in = first % per_chunk_;
    const int64_t n = std::min(count, per_chunk_ - in);
    piece(static_cast<off_t>(base_[static_cast<std::size_t>(c)] + static_cast<uint64_t>(in) * row_),
          static_cast<std::size_t>(n) * row_);
    first += n;
    count -= n;
  }
}

void RowMap::advise(int64_t first, int64_t count) const {
  pieces(first, count, [&](off_t at, std::size_t bytes) {
    ::posix_fadvise(fd_, at, static_cast<off_t>(bytes), POSIX_FADV_WILLNEED);
  });
}

void RowMap::read(int64_t first, int64_t count, void* out, const std::string& what) const {
  char* dst = static_cast<char*>(out);
  pieces(first, count, [&](off_t at, std::size_t want) {
    for (std::size_t got = 0; got < want;) {
      ssize_t k = ::pread(fd_, dst + got, want - got, at + static_cast<off_t>(got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        throw Error(Exit::io, what, "cannot read rows: " + (k < 0 ? errno_text(errno) : std::string("file truncated")));
      got += static_cast<std::size_t>(k);
    }
    dst += want;
  });
}

void write_rows(hid_t dset, const std::string& what, int64_t start, int64_t count, hid_t mem_type, const void* buf) {
  init();
  if (count == 0) return;
  Id mem;
  Id file_space = row_selection(dset, start, count, &mem);
  check(H5Dwrite(dset, mem_type, mem.get(), file_space.get(), H5P_DEFAULT, buf), Exit::io, what, "cannot write rows");
}

void copy_rows(hid_t src, const std::string& src_what, int64_t src_start, hid_t dst, const std::string& dst_what,
               int64_t dst_start, int64_t count) {
  init();
  auto info = describe(src, src_what);
  Id ftype(H5Dget_type(src));
  Id mtype(info.dtype == DType::string ? H5Tcopy(ftype.get()) : H5Tget_native_type(ftype.get(), H5T_DIR_ASCEND));
  const int64_t row_bytes = static_cast<int64_t>(H5Tget_size(mtype.get())) * info.row_elements();
  const int64_t block = rows_per_block(row_bytes, 8 << 20);
  std::vector<char> buf;
  for (int64_t s = 0; s < count; s += block) {
    int64_t n = std::min(block, count - s);
    buf.resize(static_cast<std::size_t>(n * row_bytes));
    read_rows(src, src_what, src_start + s, n, mtype.get(), buf.data());
    write_rows(dst, dst_what, dst_start + s, n, mtype.get(), buf.data());
    if (info.vlen_string) {
      hsize_t dims[1] = {static_cast<hsize_t>(n * info.row_elements())};
      Id space(H5Screate_simple(1, dims, nullptr));
      H5Dvlen_reclaim(mtype.get(), space.get(), H5P_DEFAULT, buf.data());
    }
  }
}

namespace {
void write_attr_raw(hid_t obj, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Id space(H5Screate(H5S_SCALAR));
  Id attr(check(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), Exit::io, name,
                "cannot create attribute"));
  check(H5Awrite(attr.get(), type, value), Exit::io, name, "cannot write attribute");
}

Id open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return Id();
  return Id(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
}
}  // namespace

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr_raw(obj, name, type.get(), &p);
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr_raw(obj, name, H5T_NATIVE_INT64, &value);
}

void write_attr(hid_t obj, const std::string& name, double value) {
  write_attr_raw(obj, name, H5T_NATIVE_DOUBLE, &value);
}

std::optional<std::string> read_attr_string(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  if (!attr) return std::nullopt;
  Id ftype(H5Aget_type(attr.get()));
  if (H5Tget_class(ftype.get()) != H5T_STRING) return std::nullopt;
  Id space(H5Aget_space(attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Id mtype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    char* p = nullptr;
    if (H5Aread(attr.get(), mtype.get(), &p) < 0) return std::nullopt;
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  std::size_t n = H5Tget_size(ftype.get());
  std::string s(n, '\0');
  if (H5Aread(attr.get(), ftype.get(), s.data()) < 0) return std::nullopt;
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  if (!attr) return std::nullopt;
  Id ftype(H5Aget_type(attr.get()));
  if (H5Tget_class(ftype.get()) != H5T_INTEGER) return std::nullopt;
  Id space(H5Aget_space(attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;
  int64_t v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
  return v;
}

std::optional<double> read_attr_double(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  if (!attr) return std::nullopt;
  Id ftype(H5Aget_type(attr.get()));
  auto cls = H5Tget_class(ftype.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) return std::nullopt;
  double v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}

Id untimed_create_plist(hid_t cls) {
  Id plist(H5Pcreate(cls));
  H5Pset_obj_track_times(plist.get(), false);
  return plist;
}

void create_parent_groups(hid_t file, const std::string& path) {
  for (auto slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    std::string group = path.substr(0, slash);
    if (exists(file, group)) continue;
    Id gcpl = untimed_create_plist(H5P_GROUP_CREATE);
    Id g(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
    check(g.get(), Exit::io, group, "cannot create group");
  }
}

std::vector<std::string> list_group(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  if (!exists(file, path)) return names;
  Id group(H5Gopen2(file, path.c_str(), H5P_DEFAULT));
  if (!group) throw Error(Exit::data, path, "cannot open group: " + last_error());
  herr_t status = H5Literate(
      group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  if (status < 0) throw Error(Exit::data, path, "cannot list group: " + last_error());
  return names;
}

}  // namespace traincache::io::h5
