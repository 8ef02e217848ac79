// Sources of rows: the arrays the tools read items from, whatever holds them. A column is one
// named array of rows (an HDF5 dataset, a shared-memory slab, a NumPy .npy file, a member of a
// .npz archive, or the images, labels and paths of an image folder or a manifest); every tool
// that reads items reads them through one. Torch-free.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/base/content_hash.h"
#include "traincache/base/dtype.h"
#include "traincache/base/error.h"
#include "traincache/io/image.h"

namespace traincache {

namespace slab {
class Slab;
}

namespace io::source {

/// What holds a column's rows.
enum class Kind { hdf5, shm, npy, npz, image_folder, manifest, tar };

/// "hdf5", "shm", "npy", "npz", "image-folder", "manifest" or "tar".
const char* kind_name(Kind kind);

/// The kind of `path`: "shm:NAME" is a slab, a name ending in .npy or .npz (any case) a NumPy
/// file, .csv, .tsv, .jsonl or .ndjson a manifest, .tar, .tgz, .tar.gz, .tar.bz2, .tar.xz or
/// .tar.zst WebDataset tar shards (a brace range or glob naming several: expand_shards), a
/// directory an image folder, anything else an HDF5 file.
Kind kind_of(const std::string& path);

/// An input as a tool names it (--input, --data), resolved once: what holds its rows, and the
/// columns it gives without being asked (default_column, default_labels, default_keys).
struct Resolved {
  std::string path;
  Kind kind = Kind::hdf5;
  std::string column, labels, keys;
};
/// `path` resolved (kind_of looks at the file system once).
Resolved resolve(const std::string& path);

/// How string labels of a manifest become integers: in sorted order (as ImageFolder's classes)
/// or in the order they first appear.
enum class LabelOrder { sorted, first_seen };
const Choices<LabelOrder>& label_order_choices();

/// What a manifest's field is read as (see open_column).
enum class Role { value, images, labels, text };

/// How image folders and manifests become rows: the preprocessing of every image, and the label
/// order of a manifest's string labels.
struct FileOptions {
  image::Spec preprocess;
  LabelOrder label_order = LabelOrder::sorted;
  /// Unreadable images are left for the reader to handle (cache-fill --on-error skip): a manifest's
  /// missing file is not an error at open, and files whose header cannot be read do not decide
  /// the column's shape. Reading such a row still fails.
  bool tolerate_unreadable = false;
  /// Tar shards: the fields every sample must have (the ones the options name). A sample without
  /// one is refused (Error(data) naming its shard and key) or, with tolerate_unreadable, left out
  /// of the rows of every column (Column::warning() says how many). Empty: only the column's own.
  std::vector<std::string> sample_fields;
  /// Text fields, and names stored as strings (class folders, an image folder's paths, a
  /// manifest's label and key strings): refuse ill-formed UTF-8 (Error(data) naming the line or
  /// file) instead of replacing each ill-formed sequence with U+FFFD (counted in
  /// Column::utf8_replaced() for text).
  bool strict_utf8 = false;
  /// shm:NAME inputs: read a slab another user owns (the owner of the object mapped, not of the
  /// name looked up again); refused otherwise (Error(data)), as every tool's --trust-slab-owner.
  bool trust_slab_owner = false;
};

/// True when `name`, given where a dataset of the input is expected (--features, --labels,
/// --keys, --query...), names a file of its own instead: it ends in .npy, or is "shm:NAME".
bool names_own_file(const std::string& name);

/// A column's rows as stored.
/// An image file that cannot be read or decoded, met while its column is opened (the sizes are
/// probed from the headers): Error(data or no_input) naming the file. Columns opened to tolerate
/// unreadable files (cache-fill --on-error skip) never throw it.
class UnreadableFile : public Error {
 public:
  using Error::Error;
};

struct ColumnInfo {
  std::string name;            ///< the dataset, member or file, as the user named it
  std::vector<int64_t> shape;  ///< [rows, ...]; [rows] for a ragged column
  DType dtype = DType::other;
  /// Rows of varying length (a variable-layout slab of integers: token sequences), read with
  /// read_ragged().
  bool ragged = false;

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  /// Elements in one row (product of shape[1:]).
  int64_t row_elements() const;
  /// Bytes of one row in dtype (0 for strings).
  std::size_t row_bytes() const;
};

/// An image file as stored, before decoding (Column::read_encoded).
struct EncodedImage {
  std::string bytes;
  bool jpeg = false;      ///< a JPEG (by its first bytes) that ends (image::JpegLayout::complete)
  bool baseline = false;  ///< of those, a baseline one (image::JpegLayout::baseline)
  int orientation = 1;    ///< the EXIF orientation to apply: 1 when the spec does not apply it
};

/// One named array of rows.
class Column {
 public:
  virtual ~Column() = default;
  Column(const Column&) = delete;
  Column& operator=(const Column&) = delete;

  const ColumnInfo& info() const { return info_; }
  Kind kind() const { return kind_; }
  /// The file (or "shm:NAME") the column is in, as given.
  const std::string& path() const { return path_; }

  /// Copies rows [start, start + count) into `out`: count * info().row_bytes() bytes, C order,
  /// the machine's byte order, element type info().dtype. Safe to call from several threads at
  /// once. Numeric columns only (Error(data) for strings); rows out of range -> Error(internal).
  virtual void read(int64_t start, int64_t count, void* out) const = 0;

  /// Copies the rows listed in `rows` (any order, repeats allowed) into `out`, one after another,
  /// as read() lays them out. The distinct rows are read in ascending order as runs of
  /// consecutive rows (an HDF5 dataset in one read: each chunk once). Thread-safe.
  void read_rows(const std::vector<int64_t>& rows, void* out) const;

  /// Feeds rows [a, b) to `h`, streamed in bounded blocks. The digest changes when any value does.
  virtual void digest(int64_t a, int64_t b, ContentHash& h) const;

  /// Feeds each row r of [a, b) to its own hash, hashes[r - a]: a number column's row as read()
  /// gives its bytes; any other row (images, strings, token sequences) as digest(r, r + 1) feeds
  /// it, never decoded. The digests cache-fill keeps of each row (docs/cache-format.md).
  void feed_rows(int64_t a, int64_t b, ContentHash* hashes) const;

  /// digest(a, b, h), and each row's own digest (feed_rows') into rows[r - a]: the fingerprint's
  /// digest and the row digests of a fill, from one read of each row for images (folders,
  /// manifests, tar shards), HDF5 numbers and .npy/.npz arrays; other columns read twice.
  virtual void digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const;

  /// digest_rows(a, b, h, rows), and where a row is a named file whose row digest holds its name
  /// (image folders, manifests, tar members) each file's digest without the name into
  /// files[r - a], from the same read: returns whether it wrote them (false for other columns,
  /// whose row digests name nothing). cache-fill --update finds renamed files by them.
  virtual bool digest_rows_and_files(int64_t a, int64_t b, ContentHash& h, Digest128* rows, Digest128* files) const;

  /// The HDF5 dataset behind the column (for copies that keep strings and attributes), or -1.
  virtual hid_t hdf5_dataset() const { return -1; }

  /// Rows [start, start + count) of a ragged column as int64 values end to end: row i is
  /// values[offsets[i], offsets[i+1]). Error(data) for other columns. Thread-safe.
  virtual void read_ragged(int64_t start, int64_t count, std::vector<int64_t>& values,
                           std::vector<int64_t>& offsets) const;

  /// Rows [start, start + count) of a string column (an image folder's paths, a manifest's keys).
  /// Error(data) for other columns.
  virtual std::vector<std::string> read_strings(int64_t start, int64_t count) const;

  /// For labels made from names (an image folder's classes, a manifest's string labels): the
  /// name of label i at position i. Empty otherwise.
  virtual const std::vector<std::string>& label_names() const;

  /// For a text column: how many ill-formed UTF-8 sequences were replaced with U+FFFD.
  virtual int64_t utf8_replaced() const { return 0; }

  /// Something about how the column was read that its user should be told (a manifest's label
  /// field of integers numbered as names because one value is not an integer), or "".
  virtual std::string warning() const { return {}; }

  /// A source of several files (tar shards): the first row of each file's rows, ascending, from 0;
  /// cache-fill's batches never span two and --shard shares them out whole. Empty: one file.
  virtual std::vector<int64_t> row_groups() const { return {}; }

  /// For a column of decoded images: the preprocessing applied to them. Null otherwise.
  virtual const image::Spec* preprocess() const { return nullptr; }

  /// For a column of decoded images: rows [start, start + count) as the 8-bit samples read()
  /// converts (image::preprocess_pixels: resized and cropped, C, H, W order), one byte per element
  /// of info()'s row shape. Error(internal) for other columns. Thread-safe.
  virtual void read_pixels(int64_t start, int64_t count, uint8_t* out) const;

  /// For a column of decoded images: row `row`'s file as stored, for decoding elsewhere (cache-fill
  /// --decode device), with what its header says: whether it is a JPEG and its EXIF orientation
  /// (1 unless the spec applies it). The size its header gives is checked against the row shape
  /// (Error(data) naming the file, as read_pixels). Error(internal) for other columns. Thread-safe.
  virtual EncodedImage read_encoded(int64_t row) const;

  /// For a column of decoded images: `e` (read_encoded's row `row`) decoded here and made the
  /// samples read_pixels gives. Error(internal) for other columns. Thread-safe.
  virtual void pixels_of(const EncodedImage& e, int64_t row, uint8_t* out) const;

 protected:
  Column(Kind kind, std::string path) : kind_(kind), path_(std::move(path)) {}
  void check_range(int64_t start, int64_t count) const;
  /// digest()'s stream of a number column (its name and dtype, then its rows as read() gives
  /// them); with `rows`, each row's own digest from the same reads (digest_rows of a column of
  /// numbers that reads them itself).
  void digest_numbers(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const;
  /// Reads `runs` ([first, first + count), ascending, disjoint, in range) into `out` one after
  /// another; by default one read() per run.
  virtual void read_runs(const std::vector<std::pair<int64_t, int64_t>>& runs, void* out) const;

  ColumnInfo info_;

 private:
  Kind kind_;
  std::string path_;
};

/// Rows `rows` of `base` (any order, each in range) as a column of their own: its row i is base's row
/// rows[i]. Every read goes to base with base's own rows, so what base says of a row (a file that
/// cannot be decoded, a string out of range) names the input's row, not the view's. cache-fill
/// --update encodes only its new and changed rows through such views.
std::shared_ptr<const Column> gathered(std::shared_ptr<const Column> base, std::vector<int64_t> rows);

/// True when `path` names a key table (cache-fill --labels TABLE:FIELD): a manifest (CSV, TSV,
/// JSON Lines) or a .npz archive.
bool is_key_table(const std::string& path);
/// The keys of an input's `rows` rows as text, for joined_on_keys: the values of its key column
/// `keys` (strings as they are, integers in decimal), or without one (null) the row numbers
/// 0..rows-1. Error(data) for a key column that is not 1-D integers or strings.
std::vector<std::string> key_texts(const Column* keys, int64_t rows);
/// Field `field` of key table `table` (a manifest with a field `key`, or a .npz archive with a
/// member `key`) as a column in the order of `keys` (key_texts): its row i is the table's row whose
/// key is keys[i] (integer keys match their decimal text). A manifest's field is read as labels
/// (integers, or strings numbered as label_names() says, over the whole table); a .npz member as
/// stored. Rows of the table whose key is not in `keys` are left out. Error(data) naming the table:
/// a key it holds twice; keys it has no row for (how many, and the first); as open_column().
std::shared_ptr<const Column> joined_on_keys(const std::string& table, const std::string& field,
                                             const std::vector<std::string>& keys, const FileOptions& files = {});

/// Opens column `name` of `path`:
///  - an HDF5 file: dataset `name`;
///  - "shm:NAME": the slab (attached read-only; `name` empty or `path`); a variable layout of
///    integers is a ragged column (token sequences), other variable layouts are refused;
///  - a .npy file: its array (`name` empty, `path`, or the file's stem), memory-mapped;
///  - a .npz archive: member `name` (".npy" optional); stored members are read in place,
///    compressed ones decompressed into memory once;
///  - an image folder (ImageFolder layout: one subfolder per class, sorted by name, giving labels
///    0..K-1; JPEG and PNG files sorted within, subfolders included): "image" (the decoded and
///    preprocessed images, float32 [rows, C, H, W]), "label" (int64) or "path" (the files,
///    relative to the folder);
///  - WebDataset tar shards (one file, or a pattern: expand_shards), read as streams, never
///    unpacked: members grouped into samples by key (the member's name up to the first dot of its
///    base name), a sample's fields named by the rest (`jpg`, `cls`, `txt`, `seg.png`); `name` is a
///    field (read as `role` says: images decoded, labels and values as integers or strings, text as
///    strings), `json.FIELD` a field of each sample's `json` member, and `__key__` the keys;
///  - a manifest (CSV or TSV with a header line, or JSON Lines): the field `name`, read as `role`
///    says: images (its values are paths, relative to the manifest's folder), labels (integers,
///    or strings mapped to integers in `files.label_order`, see label_names()), text (strings:
///    a JSON value must be a string; ill-formed UTF-8 as `files.strict_utf8` says) or values
///    (integers when every value is one, otherwise strings). Other kinds ignore `role`; an HDF5
///    string dataset is read with read_strings().
/// A `name` for which names_own_file() holds is opened as its own file instead of inside `path`.
/// Errors: a missing file -> Error(no_input); a missing dataset or member, or an array the tools
/// cannot read (Fortran order, object or structured dtype, big-endian floats of 16 bits...) ->
/// Error(data), naming the file.
std::unique_ptr<Column> open_column(const std::string& path, const std::string& name, const FileOptions& files = {},
                                    Role role = Role::value);
/// The same of an input resolved already (its kind not looked up again).
std::unique_ptr<Column> open_column(const Resolved& input, const std::string& name, const FileOptions& files = {},
                                    Role role = Role::value);

/// The tar files a shard pattern names, in order: shell-style braces expanded (`{00000..00099}`
/// keeping the width of zero-padded numbers, `{a,b}`), then each glob (`*`, `?`, `[...]`) matched
/// in sorted order. Error(usage) for a malformed or empty pattern, Error(no_input) for a glob that
/// matches nothing.
std::vector<std::string> expand_shards(const std::string& pattern);

/// `path` as recorded in a cache: absolute (links resolved) for a file; a tar shard pattern made
/// absolute by prefixing the working directory to a relative one; a slab's name as it is.
std::string recorded_path(const std::string& path);

/// The fields of manifest `path` (its header, or every key of its JSON lines), for messages that
/// list them. Error(no_input/data) as open_column().
std::vector<std::string> manifest_fields(const std::string& path);

/// The fields the samples of tar shards `pattern` have ("cls", "jpg", "txt", ...), sorted, and which
/// of them hold images by their extension; for defaults and messages. Error as open_column().
struct TarFields {
  std::vector<std::string> all, images;
};
TarFields tar_fields(const std::string& pattern);

/// Throws Error(no_input, path, "no such file or directory") (or the reason it cannot be
/// examined) when input `path` does not exist; slabs ("shm:NAME") are looked up when opened.
void require_input(const std::string& path);
void require_input(const Resolved& input);

/// The name a column of `path` gets when none is given: the stem of a .npy file, `path` itself
/// for a slab, "image" for an image folder; "" for HDF5 files, .npz archives and manifests,
/// whose columns must be named.
std::string default_column(const std::string& path);

/// The labels and keys an input gives without being asked: an image folder's "label" and
/// "path", tar shards' keys "__key__"; "" for every other kind.
std::string default_labels(const std::string& path);
/// The name a label column copied from `source` (a dataset, a field, a file of its own) gets when
/// none is given: the stem of a file of its own (names_own_file), else its last '/'-separated part.
std::string label_column_name(const std::string& source);
std::string default_keys(const std::string& path);

/// Throws Error(data, file, ...) when a column cannot be fed to an encoder (strings, compound
/// types, 0-d).
void require_numeric_input(const ColumnInfo& info, const std::string& file);

}  // namespace io::source
}  // namespace traincache
