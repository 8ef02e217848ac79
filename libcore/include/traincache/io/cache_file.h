// The traincache HDF5 cache format (docs/cache-format.md): reading, checking and writing.
// Torch-free: cache-inspect and the shm tools use it without linking LibTorch.
#pragma once

#include <H5Ipublic.h>  // hid_t

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "traincache/base/content_hash.h"
#include "traincache/base/dtype.h"
#include "traincache/io/source.h"

namespace traincache::io::cache {

/// Value of the root attribute "format".
inline constexpr const char* kFormatName = "traincache";
/// Current format version; readers refuse newer versions.
inline constexpr int64_t kFormatVersion = 1;
/// Where label columns are: the first at /labels, the others at /label_columns/NAME.
inline constexpr const char* kLabels = "/labels";
inline constexpr const char* kLabelColumns = "/label_columns";

/// One embedding dataset, /embeddings/<name>.
struct EmbeddingInfo {
  std::string name;
  std::vector<int64_t> shape;  ///< [rows, ...]
  DType dtype = DType::other;
  uint64_t bytes = 0;        ///< uncompressed size of the data
  std::string encoder_path;  ///< as given to cache-fill (made absolute)
  std::string encoder_sha256;
  std::vector<std::string> features;  ///< input datasets fed to the encoder, in argument order
  std::vector<std::string> text;      ///< text inputs (keys of CacheInfo::text) fed after the features
  std::string output;                 ///< output selector ("" = the whole output)
  std::string inference;              ///< "optimized" or "plain"
  double optimize_max_abs_diff = 0;   ///< optimised against plain on the first batch encoded
  double precision_max_rel_diff = 0;  ///< --precision against float32 on the first batch encoded
  /// A row encoded alone against inside the first batch: the encoder's batch noise, which bounds how
  /// far an updated cache's rows may be from a full fill's (negative: not recorded).
  double batch_max_abs_diff = -1;
  /// The same relative to the largest magnitude of the first batch's output (negative: not recorded).
  double batch_max_rel_diff = -1;
  std::string math_mode;  ///< "tf32" or "ieee" ("" in caches written before it was recorded)
  std::string precision;  ///< cache-fill's --precision ("" in caches written before it was recorded)
  /// int8's weight range (model::kInt8WeightMax); 0 where not recorded (int8 caches filled before
  /// 2026-12-04 used 127, kInt8WeightMaxUnrecorded).
  int64_t int8_weight_max = 0;
};

/// A label column: /labels, or /label_columns/NAME.
struct LabelInfo {
  std::string name;     ///< its name (the `name` attribute; in older caches, label_column_name(source))
  std::string dataset;  ///< "/labels" or "/label_columns/NAME"
  std::string source;   ///< the input dataset they were copied from
  DType dtype = DType::other;
  int64_t rows = 0;
  std::vector<int64_t> shape;         ///< dataset shape ([rows] for one label per row)
  std::map<int64_t, int64_t> counts;  ///< per class, for integer labels (when counted)
  std::vector<std::string> names;     ///< label i's name (an image folder's classes, a manifest's labels)
};

/// Everything cache-inspect shows about a file without reading embedding values.
/// A text input of a cache: a field and its tokenizer, or ragged token sequences of a slab.
struct TextInfo {
  std::string key;  ///< "field|tokenizer-file-name", or "shm:NAME|ragged"
  std::string field, tokenizer_path, tokenizer_sha256, tokenizer_kind, padding;
  int64_t max_length = 0, pad_id = 0;
  bool strict_utf8 = false, ragged = false;
};

/// What made a cache: one process's fill (perhaps updated since), one shard of a sharded job
/// (cache-fill --shard), or the merge of a job's shards (cache-fill merge). Read from the root's
/// attributes (shard_index, merged_from) by read_info alone.
enum class CacheKind { filled, shard, merged };

/// "filled", "shard" or "merged".
const char* cache_kind_name(CacheKind kind);

/// One cache-fill run in a cache's history (the root's "history" attribute, docs/cache-format.md).
struct HistoryEntry {
  std::string run;      ///< "fill", "update" or "merge"
  int64_t rows = 0;     ///< the cache's rows after the run
  int64_t encoded = 0;  ///< rows encoded (fill, update)
  /// An update's rows: copied from the cache it updated, matched by "key" or "position"; moved
  /// and copies (rows found by their content, fill::UpdatePlan) are stored only when not 0.
  struct Update {
    int64_t copied = 0, added = 0, changed = 0, removed = 0, unchanged = 0;
    std::string matched_by;
    int64_t moved = 0, copies = 0;
  };
  std::optional<Update> update;
  int64_t shard = -1;  ///< in a merged cache: the shard (in row order) this run made; -1: none
  int64_t shards = 0;  ///< merge: the shards merged
};

/// The runs that made a cache, oldest first.
using History = std::vector<HistoryEntry>;

/// The attribute's text as entries (what is not a list of objects reads as no entry): the one
/// reader of the format, as history_text is its one writer.
History parse_history(const std::string& text);

/// `history` as the attribute stores it: a compact JSON list (keys in alphabetical order).
std::string history_text(const History& history);

struct CacheInfo {
  std::string path;
  CacheKind kind = CacheKind::filled;
  int64_t shard_index = -1, shard_count = 0;  ///< a shard's place in its job (kind shard)
  int64_t format_version = 0;
  bool complete = false;
  int64_t rows = 0;
  int64_t row_start = 0;  ///< first input row encoded
  std::string fingerprint;
  std::string fingerprint_json;
  /// A shard's or a merged cache's job fingerprint document (what its shards share); "" otherwise.
  std::string job_fingerprint_json;
  std::string created_by;
  std::string input_path;
  std::vector<std::string> features;
  double input_scale = 0;
  std::string input_kind;  ///< "hdf5", "npy", "image-folder", ... ("" in caches from before sources)
  std::vector<std::pair<std::string, std::string>> preprocess;  ///< the image spec, empty without images
  std::vector<EmbeddingInfo> embeddings;
  std::optional<LabelInfo> labels;         ///< the first label column, /labels
  std::vector<LabelInfo> more_labels;      ///< the others, /label_columns/NAME, in the order cache-fill named them
  std::optional<std::string> keys_source;  ///< the input key dataset, when keys are stored
  std::optional<DType> keys_dtype;
  int64_t skipped = 0;            ///< rows listed in /skipped/rows (cache-fill --on-error skip)
  std::vector<TextInfo> text;     ///< text inputs, empty without text
  int64_t length_window = 0;      ///< rows per length window of a text fill (0: batches as read)
  bool row_digests = false;       ///< /row_digests holds each row's input digest (cache-fill --update)
  bool row_file_digests = false;  ///< /row_file_digests: each named file's digest without its name
  History history;                ///< the "history" attribute: one entry per fill, update or merge
};

/// The fingerprint document that says how the rows were made (encoders, their text inputs, options,
/// preprocessing): a fill's or a shard's own; a merged cache's job fingerprint, which its shards
/// share (its own fingerprint names only the job and the shards).
const std::string& making_fingerprint_json(const CacheInfo& info);

/// The int8 weight range of int8 caches filled before it was recorded (cache-fill before
/// 2026-12-04: each weight row's largest magnitude 127 steps; model::kInt8WeightMax since).
inline constexpr int64_t kInt8WeightMaxUnrecorded = 127;

/// The precision an embedding's rows were encoded in: its recorded `precision`, else "fp32" (caches
/// written before it was recorded).
std::string precision_of(const EmbeddingInfo& e);

/// An int8 embedding's weight range: its recorded int8_weight_max, else kInt8WeightMaxUnrecorded.
int64_t int8_weight_max(const EmbeddingInfo& e);

/// The encoder names of a cache, "cnn, text" (for messages).
std::string encoder_names(const CacheInfo& info);

/// Every label column of a cache, /labels first; empty without labels.
std::vector<const LabelInfo*> label_columns(const CacheInfo& info);
/// The label column named `name` ("" picks /labels). Error(usage, what) naming the cache's
/// columns when it has none of that name, or no labels.
const LabelInfo& label_column(const CacheInfo& info, const std::string& name, const std::string& what);
/// The name of class `value` in `column` (an image folder's class folder, a manifest's label);
/// nullopt where the column names no classes or has no name for it.
std::optional<std::string> class_name(const LabelInfo& column, int64_t value);

/// Opens `path` and reads its description. Missing -> Error(no_input); not HDF5, not a traincache
/// cache, or a newer format -> Error(data). `count_labels` tallies integer label classes.
CacheInfo read_info(const std::string& path, bool count_labels = true);

/// Per-encoder statistics of the row L2 norms and of non-finite values.
struct EmbeddingStats {
  std::string name;
  int64_t rows = 0;
  double norm_mean = 0, norm_std = 0, norm_min = 0, norm_max = 0;  ///< over finite rows
  int64_t nan_count = 0, inf_count = 0;                            ///< elements
};

/// Streams every embedding once (memory independent of the number of rows).
std::vector<EmbeddingStats> compute_stats(const std::string& path);

/// Problems found by check(); empty when the cache is sound.
struct CheckReport {
  std::string path;
  std::vector<std::string> problems;
  bool ok() const { return problems.empty(); }
};

/// What makes a cache unreadable as a whole, for every reader alike (--check, --export): complete,
/// required attributes, float32 or float16 embeddings, every dataset (embeddings, labels, keys, row
/// digests) with the cache's rows, /skipped readable. `info` is read_info's of `path`. Empty when
/// sound; values (NaN) are not looked at.
std::vector<std::string> structure_problems(const CacheInfo& info, const std::string& path);

/// Error(data, path, "damaged: <the first of structure_problems> (cache-inspect --check lists what
/// is wrong)") when there are any: how every reader that needs the whole cache (--export, gc-train)
/// refuses a damaged one before it reads a row.
void require_sound_structure(const CacheInfo& info, const std::string& path);

/// The --check contract: structure_problems, then finite values. Never throws for a bad file:
/// unreadable, missing or foreign files are reported as problems.
CheckReport check(const std::string& path);

/// One row for --head.
struct CacheRow {
  int64_t index = 0;
  std::string key;                   ///< the stored key, or the input row number
  std::optional<std::string> label;  ///< as text
  /// Every label column with one value a row (/labels first), by name: its value as text.
  std::vector<std::pair<std::string, std::string>> labels;
  /// Where a column of `labels` names its classes: the value's class name (class_name), by column.
  std::map<std::string, std::string> classes;
  std::map<std::string, std::vector<float>> embeddings;  ///< flattened row per encoder
};

/// Reads rows [0, n) (fewer when the cache is shorter).
std::vector<CacheRow> read_head(const std::string& path, int64_t n);

/// Reads rows `indices` of embedding `name` as float32, flattened (indices.size() x row elements).
std::vector<float> read_embedding_rows(const std::string& path, const std::string& name,
                                       const std::vector<int64_t>& indices);

// ---- writing -------------------------------------------------------------------------------

/// An attribute value.
using AttrValue = std::variant<std::string, int64_t, double>;
/// Attributes in the order they are written.
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

/// An embedding whose rows are in a raw little-endian file (the cache-fill journal).
struct EmbeddingSource {
  std::string name;
  std::string raw_path;
  std::vector<int64_t> row_shape;  ///< shape of one row
  DType dtype = DType::f32;        ///< f32 or f16
  Attrs attrs;
  /// cache-fill --update: per row of the new cache, the row of `kept` it copies, or -1 for the
  /// next row of raw_path (the rows the update encoded, in order). Empty: every row from raw_path.
  std::vector<int64_t> kept_rows;
  std::shared_ptr<const source::Column> kept;  ///< the updated cache's embeddings (same dtype and row shape)
};

/// What assemble() writes.
struct AssemblySpec {
  std::string out_path;
  int64_t rows = 0;
  int64_t row_start = 0;  ///< rows [row_start, row_start + rows) of labels and keys
  /// Label columns: the first copied to /labels, the others to /label_columns/NAME; each
  /// dataset's `name` and `source` attributes and the root's `label_columns` (JSON list of {name,
  /// dataset, source}) say what they are. Empty: no labels.
  struct Labels {
    std::string name, source;
    std::shared_ptr<const source::Column> col;
  };
  std::vector<Labels> labels;
  std::shared_ptr<const source::Column> keys;  ///< copied to /keys (null: none)
  Attrs root_attrs;                            ///< besides format, format_version, complete, rows
  std::vector<EmbeddingSource> embeddings;
  /// Rows left out with --on-error skip (cache row, reason): written as /skipped/rows and
  /// /skipped/reasons when there are any.
  std::vector<std::pair<int64_t, std::string>> skipped;
  /// Each row's input digest (cache-fill --update): written as /row_digests, uint8 [rows, 16],
  /// when there are any; its "inputs" attribute names the columns digested (JSON list).
  std::vector<Digest128> row_digests;
  std::string row_digest_inputs = "[]";
  /// Where the rows are named files (image folders, manifests, tar members): each file's digest
  /// without its name, written as /row_file_digests (as /row_digests) when there are any.
  std::vector<Digest128> row_file_digests;
};

/// A cache's /row_digests, one per row; empty when it has none (caches from before them, merged
/// caches). Error(data) when their number is not the cache's rows.
std::vector<Digest128> read_row_digests(const std::string& path);

/// A cache's /row_file_digests (docs/cache-format.md), one per row; empty when it has none (caches
/// of other inputs, or from before 2026-12-04's). Error(data) when their number is not the cache's rows.
std::vector<Digest128> read_row_file_digests(const std::string& path);

/// A cache's skipped rows (cache row, reason) from /skipped/rows and /skipped/reasons, in order;
/// none when it has none. Error(data) when the two datasets disagree in length.
std::vector<std::pair<int64_t, std::string>> read_skipped(const std::string& path);

/// Writes /skipped/rows (int64) and /skipped/reasons (UTF-8 strings) into open file `f`, one entry
/// per skipped row; writes nothing when `skipped` is empty.
void write_skipped(hid_t f, const std::vector<std::pair<int64_t, std::string>>& skipped);

/// Rows per HDF5 chunk for rows of `row_bytes`: about 1 MiB per chunk, at least one row.
int64_t chunk_rows(int64_t row_bytes, int64_t rows);

/// Writes the cache to "<out>.tmp" with complete=1 and renames it to `out_path`, so that a reader
/// sees either no file or a complete one. Deterministic: the same spec gives the same bytes.
void assemble(const AssemblySpec& spec);

}  // namespace traincache::io::cache
