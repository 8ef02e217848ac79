// cache-fill's engine, stage 1: the inputs (feature columns, text fields, labels, keys).
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "traincache/fill/fill.h"
#include "traincache/io/image.h"
#include "traincache/io/source.h"
#include "traincache/model/encode.h"
#include "traincache/text/tokenizer.h"

namespace traincache::fill {

// An input column the fill reads (an HDF5 dataset, a slab, a .npy file or .npz member).
struct Input {
  Input() = default;
  explicit Input(std::shared_ptr<const source::Column> c) : col(std::move(c)) {}

  std::shared_ptr<const source::Column> col;
  // Set by plan_conversion (--convert device): the column's 8-bit rows are read as they are
  // (page-locked for a CUDA device) and become float32 on this device in to_model().
  std::optional<torch::Device> convert_on;

  const source::ColumnInfo& info() const { return col->info(); }
  // Rows [start, start + count) as read() hands them to the encode loop: float32 (or int64), or
  // with convert_on the 8-bit rows. Called on the reader threads.
  torch::Tensor read(int64_t start, int64_t count, double scale) const {
    return convert_on ? read_bytes(start, count) : model::read_column_rows(*col, start, count, scale);
  }
  torch::Dtype read_dtype() const { return convert_on ? torch::kByte : model::converted_type(info().dtype); }
  // Rows as read() gave them, made what the encoders take: with convert_on, copied to that device and
  // converted there exactly as the host would (images: / 255, then - mean, / std per channel;
  // other uint8 columns: * scale, as float32 operations); otherwise `rows` itself.
  torch::Tensor to_model(const torch::Tensor& rows, double scale) const;

 private:
  torch::Tensor read_bytes(int64_t start, int64_t count) const;
  mutable torch::Tensor scalar_, mean_, std_;  // on convert_on, made once by to_model (one thread):
  //                                            the divisor (images) or factor, the statistics
};

// A text field and the tokenizer that turns it into an encoder's inputs; or a ragged column of
// token sequences (a variable-layout slab), fed as stored (no tokenizer).
struct TextInput {
  std::shared_ptr<const source::Column> col;
  std::shared_ptr<const text::Tokenizer> tok;  // null: ragged token sequences
  std::string field, tokenizer_path, tokenizer_sha256;

  // input_ids, attention_mask and token_type_ids of rows [start, start + count), int64 [count, L].
  std::vector<torch::Tensor> read(int64_t start, int64_t count, const text::TokenizeOptions& opts) const {
    if (tok)
      return model::token_tensors(text::tokenize_batch(*tok, col->read_strings(start, count), opts,
                                                       col->path() + ": field '" + field + "'", start));
    std::vector<int64_t> values, offsets;
    col->read_ragged(start, count, values, offsets);
    std::vector<int64_t> all(static_cast<std::size_t>(count));
    std::iota(all.begin(), all.end(), 0);
    return model::token_tensors(
        text::pad_rows(text::token_rows(values, std::move(offsets), opts.pad_id, col->path(), start), all));
  }
};

// Everything the fill reads: the encoders' input columns, labels and keys.
struct Inputs {
  bool from_slab = false;
  std::map<std::string, Input> features;                             // by column name
  std::map<std::string, std::vector<std::string>> per_encoder;       // encoder -> its columns, in order
  std::map<std::string, TextInput> texts;                            // by key "field|tokenizer"
  std::map<std::string, std::vector<std::string>> per_encoder_text;  // encoder -> its text keys
  std::optional<Input> labels, keys;
  int64_t rows = 0;
  int64_t unit = 0;                // rows read, encoded and committed together: a batch, or a length window
  std::vector<int64_t> groups;     // tar shards: the first row of each file (source::Column::row_groups)
  std::vector<std::string> notes;  // what the user should be told about the inputs (warnings)

  // The preprocessing of the image columns (one spec for all), or null without images.
  const image::Spec* preprocess() const {
    for (const auto& [name, d] : features)
      if (d.col->preprocess()) return d.col->preprocess();
    return nullptr;
  }
};

/// The datasets labels and keys are read from: the options', or the input's defaults.
std::string labels_name(const FillOptions& opts);
std::string keys_name(const FillOptions& opts);
/// A column for the fingerprint: shape and dtype, and its own file when it is not --input's.
nlohmann::json describe_json(const Input& in, const std::string& input);
/// Opens every column the fill reads and checks that they agree (rows, names, text, windows).
Inputs open_inputs(const FillOptions& opts);
/// --convert: marks the 8-bit feature columns (images, uint8 arrays) to be converted on `device`
/// (auto: when it is a CUDA device). Returns whether any column is.
bool plan_conversion(const FillOptions& opts, torch::Device device, Inputs& in);

}  // namespace traincache::fill
