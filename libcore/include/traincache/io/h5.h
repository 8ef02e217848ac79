// Thin RAII layer over the HDF5 C API. Every HDF5 failure becomes one traincache::Error with a
// one-line message; HDF5's automatic error-stack printing is turned off (h5::set_verbose re-enables it).
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/dtype.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"

namespace traincache::io::h5 {

/// Keeps HDF5 from closing files again at process exit. A file whose close failed (a full disk)
/// stays half-closed inside HDF5, whose exit handler then crashes on it; every tool closes its
/// files through RAII, so nothing needs that handler. Call before any other HDF5 call.
void skip_exit_cleanup();

/// Error(unavailable) unless the HDF5 library loaded at run time is thread-safe (several threads
/// read datasets at once). Checked at configure time too.
void require_thread_safe();

/// Turns HDF5's automatic error printing off (or on, for -vv). Called by every open function.
void set_verbose(bool print_stack);

/// Owns one HDF5 identifier and closes it with the matching H5?close.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  ~Id() { reset(); }

  /// The raw identifier, for HDF5 calls.
  hid_t get() const { return id_; }
  /// True when an object is held.
  explicit operator bool() const { return id_ >= 0; }
  /// Closes the object now (no-op when empty).
  void reset();
  /// Gives up ownership without closing.
  hid_t release() {
    hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// The innermost message on HDF5's error stack for this thread ("" when empty).
std::string last_error();

/// Throws Error(code, subject, what + ": " + HDF5 detail) when `status` < 0; returns it otherwise.
hid_t check(hid_t status, Exit code, const std::string& subject, const std::string& what);

/// Opens an existing HDF5 file. Missing/unreadable or not a regular file (a FIFO, a device) ->
/// Error(no_input); not HDF5 -> Error(data).
Id open_file(const std::string& path, bool writable = false);

/// Creates (truncates) a file at a path the caller owns: tests and fixtures. Tools publish their
/// outputs through create_temp_file() instead. Failures -> Error(cant_create).
Id create_file(const std::string& path);

/// Creates a new file at `tmp.path()` exclusively (H5F_ACC_EXCL: never through a link, never over
/// an existing file), picking another unpredictable name while one exists; Error(cant_create).
Id create_temp_file(files::TempPath& tmp);

/// Closes a file now and checks that its last writes reached the disk (a full disk shows here);
/// Error(io) naming `path`. The id is released either way.
void close_file(Id& file, const std::string& path);

/// True when `path` names a link below `loc` (intermediate groups are checked too).
bool exists(hid_t loc, const std::string& path);

/// The kind of object at `path` (H5O_TYPE_UNKNOWN when it cannot be read), and the number of
/// attributes of an open object: one call on HDF5 1.10 (H5O_info1_t) and 1.12+ (H5O_info2_t).
H5O_type_t object_type(hid_t loc, const std::string& path);
hsize_t attribute_count(hid_t object);

/// What an input dataset holds.
struct DatasetInfo {
  std::string name;            ///< path inside the file
  std::vector<int64_t> shape;  ///< dimensions, shape[0] = rows
  DType dtype = DType::other;  ///< element type
  bool vlen_string = false;    ///< variable-length strings
  std::size_t type_size = 0;   ///< file element size in bytes (fixed strings: their length)

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  /// Elements in one row (product of shape[1:]).
  int64_t row_elements() const;
};

/// Opens dataset `name` of `file` (the path is used in messages). Missing -> Error(data).
/// A chunked dataset without filters is opened without a chunk cache when `direct_unfiltered`:
/// reads then copy only the selected bytes of each chunk from the file instead of the whole chunk
/// (random rows of a large dataset would otherwise read a whole chunk per row).
Id open_dataset(hid_t file, const std::string& file_path, const std::string& name, bool direct_unfiltered = false);

/// Describes an open dataset.
DatasetInfo describe(hid_t dset, const std::string& name);

/// The in-memory HDF5 type for a numeric dtype (a shared id: do not close it).
hid_t native_type(DType t);

/// A new IEEE half-precision float type (HDF5 has no predefined one; h5py reads it as float16).
Id float16_type();

/// Reads rows [start, start+count) of `dset` into `buf` converting to `mem_type`.
void read_rows(hid_t dset, const std::string& what, int64_t start, int64_t count, hid_t mem_type, void* buf);

/// Reads the rows of `runs` (each [first, first+count), ascending, not overlapping) of `dset` into
/// `buf` one after another, with one H5Dread: every chunk they touch is read once.
void read_row_runs(hid_t dset, const std::string& what, const std::vector<std::pair<int64_t, int64_t>>& runs,
                   hid_t mem_type, void* buf);

/// Where each row of a dataset lies in its file, for reads of scattered rows that bypass HDF5's
/// selection machinery (which walks a selection of many row runs element by element): only for
/// a dataset stored as `mem_type` (same type and byte order), without filters, contiguous or
/// chunked with every chunk allocated and spanning whole rows, in a file opened read-only with
/// the default (POSIX) driver. Built once per dataset: one index lookup per chunk.
class RowMap {
 public:
  /// The map of `dset`, or nothing when its layout does not allow direct reads.
  static std::optional<RowMap> of(hid_t file, hid_t dset, hid_t mem_type);

  /// Copies rows [first, first + count) into `out` with positional reads of the file.
  /// Error(io) on a read error or a short read (a file truncated under us).
  void read(int64_t first, int64_t count, void* out, const std::string& what) const;

  /// Asks the kernel to start reading rows [first, first + count) from storage now
  /// (POSIX_FADV_WILLNEED): advising every run of a batch before reading any lets the reads of
  /// a batch scattered over a file larger than the page cache proceed in parallel.
  void advise(int64_t first, int64_t count) const;

 private:
  template <class F>
  void pieces(int64_t first, int64_t count, F&& piece) const;

  int fd_ = -1;                 // HDF5's own descriptor of the file (kept open by the file's Id)
  std::size_t row_ = 0;         // bytes per row
  int64_t per_chunk_ = 0;       // rows per chunk (contiguous: all rows, one "chunk")
  std::vector<uint64_t> base_;  // file offset of each chunk's first row
};

/// Writes rows [start, start+count) of `dset` from `buf` held as `mem_type`.
void write_rows(hid_t dset, const std::string& what, int64_t start, int64_t count, hid_t mem_type, const void* buf);

/// Rows of `row_bytes` that fit a read block of `block_bytes` (at least one).
inline int64_t rows_per_block(int64_t row_bytes, int64_t block_bytes) {
  return std::max<int64_t>(1, block_bytes / std::max<int64_t>(1, row_bytes));
}

/// Copies rows [src_start, src_start+count) of `src` to rows starting at `dst_start` of `dst` (same
/// element type and row shape), in blocks of about 8 MiB; variable-length strings are freed per block.
void copy_rows(hid_t src, const std::string& src_what, int64_t src_start, hid_t dst, const std::string& dst_what,
               int64_t dst_start, int64_t count);

/// Attribute helpers on any object. Writers replace an existing attribute.
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, double value);
/// Readers return nullopt when the attribute is absent or of another class.
std::optional<std::string> read_attr_string(hid_t obj, const std::string& name);
std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name);
std::optional<double> read_attr_double(hid_t obj, const std::string& name);

/// Group/dataset creation property list without modification times, so that two runs that write
/// the same data produce byte-identical files.
Id untimed_create_plist(hid_t cls);

/// Creates the missing parent groups of `path` ("/embeddings" for "/embeddings/cnn") without
/// timestamps, so that a file's bytes depend only on its content. Error(io) on failure.
void create_parent_groups(hid_t file, const std::string& path);

/// Names of the links directly below group `path` of `file`, in name order; none when the group
/// does not exist. A group that exists but cannot be opened or listed -> Error(data).
std::vector<std::string> list_group(hid_t file, const std::string& path);

}  // namespace traincache::io::h5
