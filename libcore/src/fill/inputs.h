// cache-fill's engine, stage 1: the inputs (feature columns, text fields, labels, keys), opened and
// checked without LibTorch (encoding.h reads them into tensors). docs/code-map.md shows every stage
// and the way the data flows.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/fill/fill.h"
#include "traincache/io/image.h"
#include "traincache/io/source.h"
#include "traincache/text/tokenizer.h"

namespace traincache::fill {

// The fingerprint's "decode" option of a CUDA fill with --decode device: its baseline JPEGs decoded
// by nvJPEG, the other files by the reader threads. Caches filled before it say kDecodeNvjpegEvery
// (every whole JPEG by nvJPEG), which only their --verify reads now.
inline constexpr const char* kDecodeNvjpeg = "nvjpeg-baseline";
inline constexpr const char* kDecodeNvjpegEvery = "nvjpeg";

// An input column the fill reads (an HDF5 dataset, a slab, a .npy file or .npz member).
struct Input {
  Input() = default;
  explicit Input(std::shared_ptr<const io::source::Column> c) : col(std::move(c)) {}

  std::shared_ptr<const io::source::Column> col;
  // Set by plan_conversion (--convert device): the column's 8-bit rows are read as they are and
  // become float32 on the encoders' device (encoding.h: read_rows, DeviceConversion).
  bool convert_on_device = false;
  // Set by plan_conversion (--decode device): the column's baseline JPEG files are read as they
  // are and decoded on the encoders' device (device_decode.h), its other files by the reader
  // threads (progressive JPEGs among them: GPUs' hardware decoders take baseline files only).
  bool decode_on_device = false;
  // With decode_on_device, every whole JPEG on the device, progressive ones too: how caches whose
  // fingerprint says "decode": "nvjpeg" were filled (before "nvjpeg-baseline"), for their --verify.
  bool device_decodes_every_jpeg = false;

  const io::source::ColumnInfo& info() const { return col->info(); }
};

// A text field and the tokenizer that turns it into an encoder's inputs; or a ragged column of
// token sequences (a variable-layout slab), fed as stored (no tokenizer).
struct TextInput {
  std::shared_ptr<const io::source::Column> col;
  std::shared_ptr<const text::Tokenizer> tok;  // null: ragged token sequences (or not yet loaded)
  std::string field, tokenizer_path, tokenizer_sha256;
};

// One label column of --labels [NAME=]SOURCE[,...] (label_specs): a dataset or field of the input,
// a file of its own (.npy), or a field of a key table (TABLE.csv:FIELD; .tsv, .jsonl, .ndjson or
// .npz) joined on the input's keys.
struct LabelSpec {
  std::string name;    // the column's name in the cache (unique; no '/')
  std::string source;  // as given, after NAME=
  std::string table;   // a key table's file, or ""
  std::string field;   // the key table's field ("" until open_inputs resolves a table's only one)
  bool named = false;  // NAME= given (otherwise the name follows from the source)
};

// cache-fill's --input resolved once from the options (resolve_input): what holds its rows, the
// labels and keys the options name or leave to the input's defaults, and how its files become
// rows. The stages after read this, not the input's path again.
struct InputSource {
  io::source::Resolved where;     // the path, its kind and its default columns
  std::vector<LabelSpec> labels;  // --labels, or the input's default labels (an image folder's "label")
  std::string keys;               // --key, or the input's default ("": none)
  std::string implicit;           // the column an encoder naming neither --features nor --text reads ("": none)
  io::source::FileOptions files;  // --on-error, --strict-utf8; tar shards: the fields every sample needs
  std::optional<io::source::TarFields> tar;  // tar shards: the fields their samples have
  std::vector<std::string> notes;            // to tell the user (tar shards: a 'cls' field stored nowhere)

  // The source of the first label column ("" when none): the cache's labels_source.
  std::string labels_source() const { return labels.empty() ? std::string() : labels.front().source; }
};

// A label column opened: its spec and rows (in the input's row order; a key table's joined).
struct LabelInput {
  LabelSpec spec;
  Input in;
};

// Everything the fill reads: the encoders' input columns, labels and keys.
struct Inputs {
  InputSource source;
  std::map<std::string, Input> features;                             // by column name
  std::map<std::string, std::vector<std::string>> per_encoder;       // encoder -> its columns, in order
  std::map<std::string, TextInput> texts;                            // by key "field|tokenizer"
  std::map<std::string, std::vector<std::string>> per_encoder_text;  // encoder -> its text keys
  std::vector<LabelInput> labels;  // --labels in order: the first is /labels, the others /label_columns/NAME
  std::optional<Input> keys;
  int64_t rows = 0;
  int64_t unit = 0;                // rows read, encoded and committed together: a batch, or a length window
  int64_t max_tokens = 0;          // a length window's batches: token slots at most (0: --batch-size rows)
  std::vector<int64_t> groups;     // tar shards: the first row of each file (io::source::Column::row_groups)
  std::vector<std::string> notes;  // what the user should be told about the inputs (warnings)
  int readers = 1;                 // reader threads: --workers, or what auto chose (reader_threads)
  // An update's encoded rows (Update::encoded_inputs): the input row each row read here is, for
  // messages and skipped rows. Empty: the rows are the input's own.
  std::vector<int64_t> input_rows;

  // The input's row that row `r` read here is.
  int64_t input_row(int64_t r) const { return input_rows.empty() ? r : input_rows.at(static_cast<std::size_t>(r)); }

  // Whether an image column decodes its JPEG files on the encoders' device (--decode).
  bool decode_on_device() const {
    for (const auto& [name, d] : features)
      if (d.decode_on_device) return true;
    return false;
  }

  // The preprocessing of the image columns (one spec for all), or null without images.
  const io::image::Spec* preprocess() const {
    for (const auto& [name, d] : features)
      if (d.col->preprocess()) return d.col->preprocess();
    return nullptr;
  }
};

/// Runs `read` (reading or decoding row `row`); with `skip` (--on-error skip), an input error
/// (data, no_input) is recorded in `skipped` with its reason instead and false returned.
template <class Fn>
bool tolerate_input_error(Fn&& read, int64_t row, bool skip, std::map<int64_t, std::string>& skipped) {
  try {
    read();
    return true;
  } catch (const Error& e) {
    if (!skip || (e.code() != Exit::data && e.code() != Exit::no_input)) throw;
    std::string why = e.what();
    text::repair_utf8(why);  // stored as an HDF5 string: a non-UTF-8 file name must not fail the publish
    skipped.emplace(row, why);
    return false;
  }
}

/// --input resolved once: its kind and defaults; the label columns of --labels (or the input's
/// default labels), each named by NAME=, else by its field (a key table's), the stem of its file
/// (.npy) or its dataset's last name; the keys; how its files are read. Error(no_input) for a
/// missing input; Error(usage, "--labels") for an empty item, a name with '/' or given twice.
InputSource resolve_input(const FillOptions& opts);
/// A column for the fingerprint: shape and dtype, and its own file when it is not --input's.
nlohmann::json describe_json(const Input& in, const std::string& input);
/// Opens every column the fill reads and checks that they agree (rows, names, text, windows). Text
/// fields' tokenizer files are digested, not yet read: load_tokenizers reads them.
Inputs open_inputs(const FillOptions& opts);
/// Reads each text field's tokenizer (one file once): Error(data, its path) for one it cannot take.
void load_tokenizers(Inputs& in);
/// --convert: marks the 8-bit feature columns (images, uint8 arrays) to be converted on the
/// encoders' device (auto: when it is a CUDA device, `cuda`). Returns whether any column is.
/// --decode: marks the image columns whose JPEG files are decoded there (auto: on a CUDA device
/// with nvJPEG, when they are converted there); device without the conversion there -> Error(usage),
/// on a CUDA device without nvJPEG -> Error(unavailable).
bool plan_conversion(const FillOptions& opts, bool cuda, Inputs& in);

// What an image file that cannot be read or decoded is told without --on-error skip.
inline constexpr const char* kSkipHint = " (--on-error skip stores a zero row for it and goes on)";

// The reader threads for `in` (after plan_conversion): --workers, else (auto) as many as the usable
// cores up to 4 where images are decoded on the host (the reader bounds a photo fill on all but
// the costliest encoders, and each reader keeps two batches in flight), else 1.
int reader_threads(const FillOptions& opts, const Inputs& in);

}  // namespace traincache::fill
