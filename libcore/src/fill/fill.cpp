#include "traincache/fill/fill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/version.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/safe_file.h"
#include "traincache/base/sha256.h"
#include "traincache/base/timing.h"
#include "traincache/base/version.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/journal.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/source.h"
#include "traincache/model/autocast.h"
#include "traincache/model/encode.h"
#include "traincache/text/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::fill {

std::string partial_path(const std::string& out) { return out + ".partial"; }

const Choices<OnError>& on_error_choices() {
  static const Choices<OnError> c{{OnError::fail, "fail"}, {OnError::skip, "skip"}};
  return c;
}

namespace {

using files::absolute_path;

// An input column the fill reads (an HDF5 dataset, a slab, a .npy file or .npz member).
struct Input {
  std::shared_ptr<const source::Column> col;

  const source::ColumnInfo& info() const { return col->info(); }
  torch::Tensor read(int64_t start, int64_t count, double scale) const {
    return encode::read_column_rows(*col, start, count, scale);
  }
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
      return encode::token_tensors(text::tokenize_batch(*tok, col->read_strings(start, count), opts,
                                                        col->path() + ": field '" + field + "'", start));
    std::vector<int64_t> values, offsets;
    col->read_ragged(start, count, values, offsets);
    std::vector<int64_t> all(static_cast<std::size_t>(count));
    std::iota(all.begin(), all.end(), 0);
    return encode::token_tensors(
        text::pad_rows(text::token_rows(values, std::move(offsets), opts.pad_id, col->path(), start), all));
  }
};

// A column for the fingerprint: shape and dtype, and its own file when it is not --input's.
json describe_json(const Input& in, const std::string& input) {
  json j{{"shape", in.info().shape}, {"dtype", dtype_name(in.info().dtype)}};
  if (in.col->path() != input)
    j["path"] = in.col->kind() == source::Kind::shm ? in.col->path() : absolute_path(in.col->path());
  return j;
}

// One batch of converted inputs, keyed by dataset name, and the rows skipped in it.
struct Batch {
  int64_t start = 0, count = 0;
  std::map<std::string, torch::Tensor> inputs;
  std::map<std::string, std::vector<torch::Tensor>> text;  // by text key: ids, mask, type ids
  std::map<int64_t, std::string> skipped;                  // input row -> reason
};

// Rows [b.start, b.start + b.count) of an image column, one by one: a row whose file cannot be
// read or decoded becomes zeros and is recorded in b.skipped.
torch::Tensor read_tolerant(const Input& in, Batch& b, double scale) {
  std::vector<torch::Tensor> rows;
  for (int64_t r = b.start; r < b.start + b.count; ++r) {
    try {
      rows.push_back(in.read(r, 1, scale));
    } catch (const Error& e) {
      if (e.code() != Exit::data && e.code() != Exit::no_input) throw;
      std::vector<int64_t> shape = in.info().shape;
      shape[0] = 1;
      rows.push_back(torch::zeros(shape, torch::kFloat32));
      std::string why = e.what();
      text::repair_utf8(why);  // stored as an HDF5 string: a non-UTF-8 file name must not fail the publish
      b.skipped.emplace(r, why);
    }
  }
  return torch::cat(rows);
}

// A batch's rows of `in`; with `skip`, an image column that fails is read again row by row.
torch::Tensor read_batch(const Input& in, Batch& b, double scale, bool skip) {
  if (!skip || !in.col->preprocess()) return in.read(b.start, b.count, scale);
  try {
    return in.read(b.start, b.count, scale);
  } catch (const Error& e) {
    if (e.code() != Exit::data && e.code() != Exit::no_input) throw;
    return read_tolerant(in, b, scale);
  }
}

// `out` with the rows skipped in `batch` set to zero (no embedding for them). Out of place: the
// encoder's output is an inference tensor, which must not be changed outside InferenceMode.
torch::Tensor zero_skipped(const torch::Tensor& out, const Batch& batch) {
  std::vector<int64_t> rows;
  for (const auto& [row, why] : batch.skipped) rows.push_back(row - batch.start);
  return out.index_fill(0, torch::tensor(rows, torch::kInt64), 0);
}

// Units (batches or length windows) [first_row, end_row) in steps of `unit` rows, read ahead on `workers` threads (at
// most two per worker in flight) and handed out in order.
class Prefetcher {
 public:
  Prefetcher(const std::map<std::string, Input>& inputs, const std::map<std::string, TextInput>& texts,
             const FillOptions& opts, int64_t unit, int64_t first_row, int64_t end_row)
      : pf_((end_row - first_row + unit - 1) / unit, opts.workers, 2 * std::max(1, opts.workers),
            [&inputs, &texts, &opts, unit, first_row, end_row](int64_t k) {
              Batch b;
              b.start = first_row + k * unit;
              b.count = std::min(unit, end_row - b.start);
              for (auto& [name, in] : inputs)
                b.inputs[name] = read_batch(in, b, opts.input_scale, opts.on_error == OnError::skip);
              for (auto& [key, t] : texts) b.text[key] = t.read(b.start, b.count, opts.tokenize);
              return b;
            }) {}

  int64_t batches() const { return pf_.count(); }
  // Blocks until the next batch is ready; rethrows a reader's error.
  Batch next() { return pf_.next(); }

 private:
  OrderedPrefetcher<Batch> pf_;
};

// Every input byte and every option that changes the stored values, and what all shards of one
// job share (everything but their own rows and digest).
struct Fingerprint {
  json doc, job;
  std::string text, hash, job_hash;
};

// The journal in `partial`: adopted only when the directory is private to this user and the
// journal validates against this run. With --force, a foreign, damaged or other run's journal is
// discarded instead of refused.
Journal open_journal(const std::string& partial, const Fingerprint& fp, const std::vector<std::string>& encoder_names,
                     int64_t rows, int64_t unit, const FillOptions& opts) {
  auto start_over = [&] {
    std::error_code ec;
    fs::remove_all(partial, ec);
    if (ec) throw Error(Exit::cant_create, partial, "cannot discard it: " + errno_text(ec.value()));
    files::make_or_adopt_private_dir(partial);
    return Journal(partial);
  };
  try {
    files::make_or_adopt_private_dir(partial);
  } catch (const Error&) {
    if (!opts.force) throw;
    return start_over();
  }
  Journal journal(partial);
  try {
    if (!journal.load()) return journal;
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) throw;
    return start_over();
  }
  if (journal.fingerprint != fp.hash) {
    const std::string changed = journal.fingerprint_json.empty()
                                    ? ""
                                    : " (changed: " + fingerprint_diff(journal.fingerprint_json, fp.text) + ")";
    if (!opts.force)
      throw Error(Exit::cant_create, partial,
                  "holds progress of a run with another fingerprint" + changed + "; use --force to discard it");
    return start_over();
  }
  try {
    journal.validate(encoder_names, rows, unit, dtype_size(opts.dtype));
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) throw;
    return start_over();
  }
  return journal;
}

// ---- stage: open inputs ---------------------------------------------------------------------

// Everything the fill reads: the encoders' input columns, labels and keys.
struct Inputs {
  bool from_slab = false;
  std::map<std::string, Input> features;                             // by column name
  std::map<std::string, std::vector<std::string>> per_encoder;       // encoder -> its columns, in order
  std::map<std::string, TextInput> texts;                            // by key "field|tokenizer"
  std::map<std::string, std::vector<std::string>> per_encoder_text;  // encoder -> its text keys
  std::optional<Input> labels, keys;
  int64_t rows = 0;
  int64_t unit = 0;  // rows read, encoded and committed together: a batch, or a length window

  // The preprocessing of the image columns (one spec for all), or null without images.
  const image::Spec* preprocess() const {
    for (const auto& [name, d] : features)
      if (d.col->preprocess()) return d.col->preprocess();
    return nullptr;
  }
};

std::string labels_name(const FillOptions& opts) {
  return opts.labels.empty() ? source::default_labels(opts.input) : opts.labels;
}
std::string keys_name(const FillOptions& opts) {
  return opts.keys.empty() ? source::default_keys(opts.input) : opts.keys;
}

// Encoder e's text fields, each opened once per tokenizer (a tokenizer file loaded once).
void open_text(const FillOptions& opts, const EncoderSpec& e, const source::FileOptions& files,
               std::map<std::string, std::shared_ptr<const text::Tokenizer>>& tokenizers, Inputs& in) {
  const auto& fields = e.text.empty() ? opts.text : e.text;
  const std::string tok_path = e.tokenizer.empty() ? opts.tokenizer : e.tokenizer;
  in.per_encoder_text[e.name];  // every encoder has an entry, perhaps empty
  for (const auto& f : fields) {
    // "field|tokenizer.json" names it in the fingerprint and in messages; the full path only when
    // two tokenizers of one file name read the same field.
    std::string key = f + "|" + fs::path(tok_path).filename().string();
    if (auto it = in.texts.find(key); it != in.texts.end() && it->second.tokenizer_path != tok_path)
      key = f + "|" + tok_path;
    in.per_encoder_text[e.name].push_back(key);
    if (in.texts.count(key)) continue;
    auto& tok = tokenizers[tok_path];
    if (!tok) tok = text::load(tok_path);
    TextInput t{source::open_column(opts.input, f, files, source::Role::text), tok, f, tok_path, sha256_file(tok_path)};
    if (t.col->info().dtype != DType::string || t.col->info().shape.size() != 1)
      throw Error(
          Exit::data, opts.input,
          "text field '" + f + "' must hold one string per row (a manifest field or a 1-D HDF5 string dataset)");
    in.texts.emplace(key, std::move(t));
  }
}

// Why encoder `name` has no input: for a manifest, its fields and the flags that name them.
std::string no_features_message(const std::string& input, const std::string& name) {
  std::string msg = "no input dataset for encoder '" + name + "'";
  if (source::kind_of(input) != source::Kind::manifest) return msg;
  std::string fields;
  for (const auto& f : source::manifest_fields(input)) fields += (fields.empty() ? "" : ", ") + f;
  return msg + ": name the manifest's image field with --features FIELD or its text field with --text FIELD (" + input +
         " has " + fields + ")";
}

// The columns every encoder reads (--features, or the one array of a .npy file or slab), and the
// labels and keys to copy. A name ending in .npy (or shm:NAME) is a file of its own.
void open_columns(const FillOptions& opts, Inputs& in) {
  source::require_input(opts.input);  // a mistyped --input is 66, before any option about its contents
  const std::string implicit = source::default_column(opts.input);
  source::FileOptions files = opts.files;
  files.tolerate_unreadable = opts.on_error == OnError::skip;
  files.strict_utf8 = opts.tokenize.strict_utf8;
  std::map<std::string, std::shared_ptr<const text::Tokenizer>> tokenizers;
  for (const auto& e : opts.encoders) {
    open_text(opts, e, files, tokenizers, in);
    auto feats = e.features.empty() ? opts.features : e.features;
    if (feats.empty() && !implicit.empty() && in.per_encoder_text[e.name].empty()) feats = {implicit};
    if (feats.empty() && !in.per_encoder_text[e.name].empty()) {
      in.per_encoder[e.name] = {};
      continue;
    }
    if (feats.empty()) throw Error(Exit::usage, "--features", no_features_message(opts.input, e.name));
    auto& own = in.per_encoder[e.name];
    for (const auto& f : feats) {
      // Ragged columns (token sequences) are fed after the others, padded per batch like text.
      const std::string ragged = f + "|ragged";
      if (!in.features.count(f) && !in.texts.count(ragged)) {
        Input d{source::open_column(opts.input, f, files, source::Role::images)};
        encode::require_numeric_input(d.info(), opts.input);
        if (d.info().ragged)
          in.texts.emplace(ragged, TextInput{d.col, nullptr, f, "", ""});
        else
          in.features.emplace(f, std::move(d));
      }
      if (in.texts.count(ragged))
        in.per_encoder_text[e.name].push_back(ragged);
      else
        own.push_back(f);
    }
  }
  for (auto [which, name, role] : {std::tuple{&in.labels, labels_name(opts), source::Role::labels},
                                   std::tuple{&in.keys, keys_name(opts), source::Role::value}}) {
    if (name.empty()) continue;
    Input d{source::open_column(opts.input, name, files, role)};
    if (d.info().dtype == DType::other)
      throw Error(Exit::data, opts.input, "dataset '" + name + "' has an unsupported dtype");
    *which = std::move(d);
  }
  if (in.keys && (in.keys->info().shape.size() != 1 ||
                  !(is_integer(in.keys->info().dtype) || in.keys->info().dtype == DType::string)))
    throw Error(Exit::data, opts.input, "key dataset '" + keys_name(opts) + "' must be 1-D integers or strings");
}

// Rows read and committed together: a length window (--length-window rows, by default 16
// batches, rounded up to whole batches) when every encoder reads only text padded to its batch's
// longest; else one batch.
int64_t window_rows(const FillOptions& opts, const Inputs& in) {
  const bool asked = opts.length_window > 0;
  if (opts.length_window == 0 || in.texts.empty()) {
    if (asked)
      throw Error(Exit::usage, "--length-window",
                  "sorts texts (--text) or token sequences (a variable-layout slab) by length; there are none");
    return opts.batch_size;
  }
  if (opts.tokenize.padding == text::Padding::max_length) {
    if (asked) throw Error(Exit::usage, "--length-window", "has nothing to gain with --padding max-length");
    return opts.batch_size;
  }
  for (const auto& [name, cols] : in.per_encoder)
    if (!cols.empty()) {
      if (asked)
        throw Error(Exit::usage, "--length-window", "encoder '" + name + "' also reads --features; it sorts text only");
      return opts.batch_size;
    }
  const int64_t want = asked ? opts.length_window : 16 * opts.batch_size;
  return (want + opts.batch_size - 1) / opts.batch_size * opts.batch_size;
}

Inputs open_inputs(const FillOptions& opts) {
  Inputs in;
  in.from_slab = source::kind_of(opts.input) == source::Kind::shm;
  open_columns(opts, in);
  const source::ColumnInfo& first =
      in.features.empty() ? in.texts.begin()->second.col->info() : in.features.begin()->second.info();
  in.rows = first.rows();
  if (in.rows == 0) throw Error(Exit::data, opts.input, "dataset '" + first.name + "' has no rows: nothing to encode");
  auto same_rows = [&](const source::ColumnInfo& info) {
    if (info.rows() != in.rows)
      throw Error(Exit::data, opts.input,
                  "rows mismatch: '" + first.name + "' has " + std::to_string(in.rows) + " rows but '" + info.name +
                      "' has " + std::to_string(info.rows()));
  };
  for (const auto& [name, d] : in.features) same_rows(d.info());
  for (const auto& [key, t] : in.texts) same_rows(t.col->info());
  if (in.labels) same_rows(in.labels->info());
  if (in.keys) same_rows(in.keys->info());
  in.unit = window_rows(opts, in);
  return in;
}

// ---- stage: fingerprint ---------------------------------------------------------------------

// The text fields and how they are tokenized (fingerprint and the cache's "text" attribute).
json text_json(const FillOptions& opts, const Inputs& in) {
  json j = json::object();
  for (const auto& [key, t] : in.texts)
    j[key] = t.tok ? json{{"field", t.field},
                          {"tokenizer_sha256", t.tokenizer_sha256},
                          {"tokenizer_kind", t.tok->kind()},
                          {"max_length", text::effective_max_length(*t.tok, opts.tokenize)},
                          {"padding", text::padding_choices().name(opts.tokenize.padding)},
                          {"strict_utf8", opts.tokenize.strict_utf8}}
                   : json{{"field", t.field}, {"ragged", true}, {"pad_id", opts.tokenize.pad_id}};
  return j;
}

Fingerprint compute_fingerprint(const FillOptions& opts, const Inputs& in, const RowPlan& plan,
                                const std::vector<std::string>& enc_sha, const torch::Device& device) {
  ContentHash content;
  for (const auto& [name, d] : in.features) d.col->digest(plan.begin, plan.end, content);
  for (const auto& [key, t] : in.texts) t.col->digest(plan.begin, plan.end, content);
  if (in.labels) in.labels->col->digest(plan.begin, plan.end, content);
  if (in.keys) in.keys->col->digest(plan.begin, plan.end, content);
  Fingerprint f;
  json& fp = f.doc;
  fp["format_version"] = cache::kFormatVersion;
  fp["input"]["path"] = in.from_slab ? opts.input : absolute_path(opts.input);
  for (const auto& [name, d] : in.features) fp["input"]["features"][name] = describe_json(d, opts.input);
  fp["input"]["labels"] = in.labels ? describe_json(*in.labels, opts.input) : json(nullptr);
  if (in.labels) fp["input"]["labels"]["name"] = labels_name(opts);
  fp["input"]["keys"] = in.keys ? describe_json(*in.keys, opts.input) : json(nullptr);
  if (in.keys) fp["input"]["keys"]["name"] = keys_name(opts);
  if (const image::Spec* spec = in.preprocess())
    for (const auto& [k, v] : spec->describe()) fp["preprocess"][k] = v;
  fp["input"]["rows"] = {plan.begin, plan.end};
  fp["input"]["content_xxh3"] = content.hex_digest();
  for (std::size_t i = 0; i < opts.encoders.size(); ++i) {
    const auto& e = opts.encoders[i];
    fp["encoders"][e.name] = {{"sha256", enc_sha[i]}, {"features", in.per_encoder.at(e.name)}, {"output", e.output}};
    if (!in.per_encoder_text.at(e.name).empty()) fp["encoders"][e.name]["text"] = in.per_encoder_text.at(e.name);
  }
  if (!in.texts.empty()) fp["text"] = text_json(opts, in);
  fp["options"] = {{"input_scale", opts.input_scale},
                   {"dtype", dtype_name(opts.dtype)},
                   {"batch_size", opts.batch_size},
                   {"optimize", opts.optimize},
                   {"device_type", device.is_cuda() ? "cuda" : "cpu"}};
  if (opts.on_error == OnError::skip) fp["options"]["on_error"] = "skip";  // absent: fail (older caches)
  if (opts.precision != Precision::fp32) fp["options"]["precision"] = precision_choices().name(opts.precision);
  // TF32 rows differ from full-float32 ones: a resume must not mix them (absent: ieee, older caches).
  if (std::string(precision::math_mode(device)) == "tf32") fp["options"]["math_mode"] = "tf32";
  if (in.unit > opts.batch_size) fp["options"]["length_window"] = in.unit;  // absent: batches as read
  f.text = fp.dump();
  f.hash = sha256_hex(f.text);
  f.job = fp;
  f.job["input"].erase("rows");
  f.job["input"].erase("content_xxh3");
  f.job["input"]["job_rows"] = {plan.job_begin, plan.job_end};
  f.job["shards"] = opts.shard_count;
  f.job_hash = sha256_hex(f.job.dump());
  return f;
}

// ---- stage: an existing cache ----------------------------------------------------------------

// The existing cache at `out` when it is complete and has this fingerprint (up to date); nothing
// when there is none (or --force); Error(cant_create) when another file is in the way.
std::optional<cache::CacheInfo> up_to_date_cache(const std::string& out, const Fingerprint& fp, bool force) {
  struct stat st;
  if (stat(out.c_str(), &st) != 0 || force) return std::nullopt;
  std::optional<cache::CacheInfo> old;
  try {
    old = cache::read_info(out, false);
  } catch (const Error&) {
    throw Error(Exit::cant_create, out, "exists and is not a readable traincache cache; use --force to overwrite it");
  }
  if (old->complete && old->fingerprint == fp.hash) return old;
  throw Error(Exit::cant_create, out,
              "exists with another fingerprint (changed: " + fingerprint_diff(old->fingerprint_json, fp.text) +
                  "); use --force to overwrite it");
}

// ---- stage: encode ---------------------------------------------------------------------------

// The encode loop over one run's rows: batches from the prefetcher go through every encoder, the
// first batch with its checks (optimisation, determinism), and rows are appended to the journal's
// raw files and committed every --commit-rows.
class Encoding {
 public:
  Encoding(const FillOptions& opts, const Inputs& in, std::vector<std::unique_ptr<encode::Encoder>>& encoders,
           Journal& journal, FillResult& result, const FillCallbacks& cb)
      : opts_(opts),
        in_(in),
        encoders_(encoders),
        journal_(journal),
        result_(result),
        cb_(cb),
        committed_(journal.committed_rows > 0 ? journal.encoders : std::map<std::string, JournalEncoder>{}),
        row_shapes_(encoders.size()) {
    if (journal.committed_rows == 0) {
      journal.encoders.clear();
      journal.skipped.clear();
    }
    for (std::size_t i = 0; i < encoders.size(); ++i) {
      auto it = committed_.find(encoders[i]->name());
      int64_t keep = 0;
      if (it != committed_.end()) {
        row_shapes_[i] = it->second.row_shape;
        keep = journal.committed_rows * row_bytes_of(row_shapes_[i], dtype_size(opts.dtype));
      }
      raws_.emplace_back(journal.raw(encoders[i]->name()), keep);
    }
  }

  // Encodes rows [begin + committed, end). Returns false when interrupted (progress committed).
  bool run(const RowPlan& plan) {
    int64_t done = journal_.committed_rows, last_commit = done;
    if (done >= plan.rows()) return true;
    Prefetcher pf(in_.features, in_.texts, opts_, in_.unit, plan.begin + done, plan.end);
    if (cb_.progress) cb_.progress(done, plan.rows());
    for (int64_t k = 0; k < pf.batches(); ++k) {
      if (interrupt_requested()) {
        if (done > last_commit) commit(done);
        return false;
      }
      Batch batch = pf.next();
      for (std::size_t i = 0; i < encoders_.size(); ++i) encode(i, batch, k == 0);
      for (const auto& [row, why] : batch.skipped) {
        journal_.skipped.emplace_back(row - plan.begin, why);
        if (cb_.warn) cb_.warn("skipped input row " + std::to_string(row) + ": " + why);
      }
      done += batch.count;
      result_.rows_encoded += batch.count;
      if (done - last_commit >= opts_.commit_rows || done == plan.rows()) {
        commit(done);
        last_commit = done;
      }
      if (cb_.progress) cb_.progress(done, plan.rows());
    }
    return true;
  }

  // Closes the raw files (checked) before they are published.
  void close() {
    for (auto& r : raws_) r.close();
  }
  // Closes without checks on an error path.
  void abandon() { raws_.clear(); }

  const std::vector<int64_t>& row_shape(std::size_t i) const { return row_shapes_[i]; }

 private:
  void commit(int64_t rows) {
    for (auto& r : raws_) r.sync();
    for (std::size_t i = 0; i < raws_.size(); ++i)
      journal_.encoders[encoders_[i]->name()].chunks.emplace_back(rows, raws_[i].take_digest());
    journal_.committed_rows = rows;
    journal_.save();
  }

  // A tokenizer with more tokens than the encoder's embedding table gives ids it cannot look up.
  void check_vocabulary(encode::Encoder& enc) {
    for (const auto& key : in_.per_encoder_text.at(enc.name())) {
      const TextInput& t = in_.texts.at(key);
      if (t.tok)
        encode::check_vocabulary(enc.module(), "encoder '" + enc.name() + "'", *t.tok, t.tokenizer_path,
                                 opts_.tokenize.vocab_table);
    }
  }

  // The first batch: optimisation (kept as the committed rows had it) and the determinism check.
  void first_batch_checks(encode::Encoder& enc, const std::vector<torch::Tensor>& args, JournalEncoder& je) {
    auto committed = committed_.find(enc.name());
    const bool resumed = committed != committed_.end();
    bool want_opt = resumed ? committed->second.inference == "optimized" : opts_.optimize;
    if (want_opt) {
      auto o = enc.try_optimize(args, kOptimizeTolerance);
      if (!o.used && resumed)
        throw Error(Exit::data, "encoder '" + enc.name() + "'",
                    "the optimised module used for the committed rows is no longer usable (" + o.why_not +
                        "); use --force to start over");
      if (!o.used && !o.plain_nonfinite && cb_.warn)
        cb_.warn("encoder '" + enc.name() + "': using the plain module: " + o.why_not);
      if (!resumed) je.optimize_max_abs_diff = o.max_abs_diff;
    }
    if (opts_.precision != Precision::fp32) check_precision(enc, args, resumed, je);
    if (opts_.check_determinism) {
      torch::Tensor once = enc.forward(args), again = enc.forward(args);
      if (!torch::equal(once, again))
        throw Error(Exit::data, "encoder '" + enc.name() + "'",
                    "not deterministic: two runs on the first batch differ (dropout or randomness left on?)");
    }
  }

  // The largest difference of `enc`'s reduced-precision output on `args` from `want` (float32),
  // relative to want's largest magnitude.
  double precision_difference(encode::Encoder& enc, const std::vector<torch::Tensor>& args, const torch::Tensor& want) {
    enc.set_precision(opts_.precision);
    torch::Tensor got = enc.forward(args);
    c10::InferenceMode guard;
    auto w = want.to(torch::kFloat64), g = got.to(torch::kFloat64);
    const double scale = std::max(w.abs().max().item<double>(), std::numeric_limits<double>::min());
    return (w - g).abs().max().item<double>() / scale;
  }

  // --precision: the first batch in reduced precision against float32, within the tolerance
  // (relative to the largest float32 magnitude); the encoder then stays in reduced precision.
  // An optimised module beyond the tolerance gives way to the plain one (on CPUs without native
  // bfloat16, oneDNN's prepacked bf16 path can be several times further off) unless committed
  // rows were encoded with it.
  void check_precision(encode::Encoder& enc, const std::vector<torch::Tensor>& args, bool resumed, JournalEncoder& je) {
    const torch::Tensor want = enc.forward(args);
    double rel = precision_difference(enc, args, want);
    const char* name = precision_choices().name(opts_.precision);
    if (!(rel <= opts_.precision_tolerance) && !resumed && std::string(enc.inference()) == "optimized") {
      enc.set_precision(Precision::fp32);
      enc.use_plain();
      const double plain = precision_difference(enc, args, enc.forward(args));
      if (plain <= opts_.precision_tolerance && cb_.warn)
        cb_.warn("encoder '" + enc.name() + "': using the plain module: the optimised module's " + name +
                 " output differs from float32 by " + percent(rel) + ", the plain module's by " + percent(plain));
      rel = plain;
    }
    if (!(rel <= opts_.precision_tolerance)) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "%s output differs from float32 by %.3g%% of its largest value on the first batch (tolerance "
                    "%.3g%%): use --precision fp32, or a larger --precision-tolerance",
                    name, 100 * rel, 100 * opts_.precision_tolerance);
      throw Error(Exit::data, "encoder '" + enc.name() + "'", buf);
    }
    if (!resumed) je.precision_max_rel_diff = rel;
  }

  static std::string percent(double fraction) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g%%", 100 * fraction);
    return buf;
  }

  // The order in which the rows of a length window are encoded, batch by batch: by their token
  // count (stable), so that each batch holds texts of similar length. Undefined (as read) for one
  // batch, and for encoders without text.
  torch::Tensor encode_order(const std::string& enc, const Batch& batch) const {
    if (in_.unit <= opts_.batch_size || in_.per_encoder_text.at(enc).empty()) return {};
    torch::Tensor tokens = torch::zeros({batch.count}, torch::kLong);
    for (const auto& key : in_.per_encoder_text.at(enc)) tokens += batch.text.at(key)[1].sum(1);
    return std::get<1>(tokens.sort(/*stable=*/true, 0, false));
  }

  // Where a text field's tensors are among an encoder's arguments (n from `first`), and its mask.
  struct TextArgs {
    std::size_t first, n;
    torch::Tensor mask;
  };

  // Rows `rows` of every argument; each text field's tensors trimmed to its longest text there.
  static std::vector<torch::Tensor> rows_of(const std::vector<torch::Tensor>& args,
                                            const std::vector<TextArgs>& text_args, const torch::Tensor& rows) {
    std::vector<torch::Tensor> out;
    for (const auto& a : args) out.push_back(a.index_select(0, rows));
    for (const auto& t : text_args) encode::trim_padding(&out[t.first], t.n, t.mask.index_select(0, rows));
    return out;
  }

  // Rows [a, b) of every argument (the arguments themselves when that is all of them).
  static std::vector<torch::Tensor> slice_rows(const std::vector<torch::Tensor>& args, int64_t a, int64_t b) {
    if (args.empty() || (a == 0 && b == args.front().size(0))) return args;
    std::vector<torch::Tensor> out;
    for (const auto& t : args) out.push_back(t.slice(0, a, b));
    return out;
  }

  // Token ids of a ragged input must index the encoder's first embedding table.
  void check_ragged_ids(encode::Encoder& enc, const torch::Tensor& ids, const Batch& batch) {
    const auto& table = tables(enc).token;
    if (!table) return;
    const torch::Tensor row_max = std::get<0>(ids.max(1));
    const int64_t r = row_max.argmax().item<int64_t>(), id = row_max[r].item<int64_t>();
    if (id >= table->rows)
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "token id " + std::to_string(id) + " of input row " + std::to_string(batch.start + r) +
                      " is beyond its embedding table " + table->name + " of " + std::to_string(table->rows) + " rows");
  }

  // A text longer than the encoder's position table would fail inside it ("index out of range in
  // self", naming no row): refused naming the row, its length and the table.
  void check_lengths(encode::Encoder& enc, const torch::Tensor& mask, const Batch& batch) {
    const auto& table = tables(enc).position;
    if (!table) return;
    const torch::Tensor lengths = mask.sum(1);
    const int64_t r = lengths.argmax().item<int64_t>(), n = lengths[r].item<int64_t>();
    if (n > table->rows)
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "input row " + std::to_string(batch.start + r) + " holds " + std::to_string(n) +
                      " tokens but the position table " + table->name + " has " + std::to_string(table->rows) +
                      " rows: give --max-length " + std::to_string(table->rows) + " (or less)");
  }

  struct Tables {
    std::optional<encode::EmbeddingTable> token, position;
  };
  // An encoder's token and position tables, found once.
  const Tables& tables(encode::Encoder& enc) {
    auto [it, added] = tables_.emplace(enc.name(), Tables{});
    if (added) {
      int64_t vocab = 0;
      for (const auto& key : in_.per_encoder_text.at(enc.name()))
        if (const auto& tok = in_.texts.at(key).tok) vocab = std::max(vocab, tok->vocab_size());
      it->second.token = encode::token_table(enc.module(), vocab, opts_.tokenize.vocab_table);
      it->second.position = encode::position_table(enc.module(), it->second.token ? it->second.token->name : "");
    }
    return it->second;
  }

  // One batch through encoder i (with the first batch's checks when `first`), as stored.
  torch::Tensor forward_batch(std::size_t i, const std::vector<torch::Tensor>& args, int64_t rows, bool first) {
    auto& enc = *encoders_[i];
    JournalEncoder& je = journal_.encoders[enc.name()];
    auto t_setup = Clock::now();
    if (first) first_batch_checks(enc, args, je);
    result_.model_setup_seconds += seconds_since(t_setup);
    auto t_enc = Clock::now();
    torch::Tensor out = enc.forward(args);
    out = out.to(torch::kCPU, opts_.dtype == DType::f16 ? torch::kFloat16 : torch::kFloat32).contiguous();
    result_.encode_seconds += seconds_since(t_enc);
    if (out.dim() < 1 || out.size(0) != rows)
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "returned " + (out.dim() ? std::to_string(out.size(0)) : std::string("0-d")) +
                      " rows for a batch of " + std::to_string(rows));
    return out;
  }

  // One encoder on one unit (a batch, or a length window encoded batch by batch in length
  // order): forward, checks of the output, append to the raw file in input order.
  void encode(std::size_t i, const Batch& batch, bool first) {
    auto& enc = *encoders_[i];
    std::vector<torch::Tensor> args;
    std::vector<TextArgs> text_args;
    for (const auto& f : in_.per_encoder.at(enc.name())) args.push_back(batch.inputs.at(f));
    const auto& keys = in_.per_encoder_text.at(enc.name());
    if (first) check_vocabulary(enc);
    const std::size_t n = encode::text_tensors(enc.arity(), args.size(), keys.size(), "encoder '" + enc.name() + "'");
    for (const auto& key : keys) {
      const auto& t = batch.text.at(key);
      if (!in_.texts.at(key).tok) check_ragged_ids(enc, t[0], batch);
      check_lengths(enc, t[1], batch);
      text_args.push_back({args.size(), n, t[1]});
      args.insert(args.end(), t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
    }
    const torch::Tensor order = encode_order(enc.name(), batch);
    std::vector<torch::Tensor> outs;
    try {
      for (int64_t a = 0; a < batch.count; a += opts_.batch_size) {
        const int64_t b = std::min(a + opts_.batch_size, batch.count);
        outs.push_back(
            forward_batch(i, order.defined() ? rows_of(args, text_args, order.slice(0, a, b)) : slice_rows(args, a, b),
                          b - a, first && a == 0));
      }
    } catch (const Error& e) {
      if (text_args.empty() || std::string(e.what()).find("index out of range") == std::string::npos) throw;
      const torch::Tensor lengths = text_args.front().mask.sum(1);
      const int64_t r = lengths.argmax().item<int64_t>();
      throw Error(e.code(), "",
                  std::string(e.what()) + " (input rows " + std::to_string(batch.start) + ".." +
                      std::to_string(batch.start + batch.count - 1) + "; the longest, row " +
                      std::to_string(batch.start + r) + ", holds " + std::to_string(lengths[r].item<int64_t>()) +
                      " tokens: a text longer than the encoder's position table, or a token id beyond its token "
                      "table, fails so)");
    }
    torch::Tensor out = outs.size() == 1 ? outs[0] : torch::cat(outs);
    if (order.defined()) out = torch::empty_like(out).index_copy_(0, order, out);
    JournalEncoder& je = journal_.encoders[enc.name()];
    if (!batch.skipped.empty()) out = zero_skipped(out, batch);
    std::vector<int64_t> shape(out.sizes().begin() + 1, out.sizes().end());
    if (!je.has_shape) {
      row_shapes_[i] = shape;
      je.has_shape = true;
      je.row_shape = shape;
      je.inference = enc.inference();
    } else if (shape != row_shapes_[i]) {
      throw Error(Exit::data, "encoder '" + enc.name() + "'", "output row shape changed between batches");
    }
    if (!torch::isfinite(out).all().item<bool>()) {
      auto bad = (~torch::isfinite(out.reshape({batch.count, -1})).all(1)).nonzero();
      int64_t row = batch.start + bad[0][0].item<int64_t>();
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "embedding of input row " + std::to_string(row) + " holds NaN or Inf");
    }
    std::size_t nbytes = static_cast<std::size_t>(out.numel()) * out.element_size();
    raws_[i].append(out.data_ptr(), nbytes);
    result_.bytes_written += nbytes;
  }

  const FillOptions& opts_;
  const Inputs& in_;
  std::vector<std::unique_ptr<encode::Encoder>>& encoders_;
  Journal& journal_;
  FillResult& result_;
  const FillCallbacks& cb_;
  const std::map<std::string, JournalEncoder> committed_;  // as loaded: what the committed rows used
  std::vector<std::vector<int64_t>> row_shapes_;
  std::vector<RawFile> raws_;
  std::map<std::string, Tables> tables_;  // by encoder, once
};

// ---- stage: publish --------------------------------------------------------------------------

// Builds the HDF5 cache from the journal and renames it into place; fills result.encoders.
void publish(const std::string& out, const FillOptions& opts, const Inputs& in, const RowPlan& plan,
             const Fingerprint& fp, const std::vector<std::unique_ptr<encode::Encoder>>& encoders,
             const std::vector<std::string>& enc_sha, const Encoding& encoding, Journal& journal,
             const torch::Device& device, FillResult& result) {
  cache::AssemblySpec spec;
  spec.out_path = out;
  spec.rows = plan.rows();
  spec.row_start = plan.begin;
  if (in.labels) spec.labels = in.labels->col;
  if (in.keys) spec.keys = in.keys->col;
  spec.skipped = journal.skipped;
  result.skipped = static_cast<int64_t>(journal.skipped.size());
  json all_features = json::array();
  for (const auto& [name, d] : in.features) all_features.push_back(name);
  spec.root_attrs = {{"created_by", version_banner("cache-fill")},
                     {"fingerprint", fp.hash},
                     {"fingerprint_json", fp.text},
                     {"input_path", in.from_slab ? opts.input : absolute_path(opts.input)},
                     {"features", all_features.dump()},
                     {"input_scale", opts.input_scale},
                     {"labels_source", labels_name(opts)},
                     {"keys_source", keys_name(opts)},
                     {"input_kind", std::string(source::kind_name(source::kind_of(opts.input)))},
                     {"device_type", std::string(device.is_cuda() ? "cuda" : "cpu")},
                     {"batch_size", opts.batch_size},
                     {"length_window", in.unit > opts.batch_size ? in.unit : int64_t{0}}};
  if (!in.texts.empty()) {
    json t = text_json(opts, in);
    for (const auto& [key, ti] : in.texts)
      if (ti.tok) t[key]["tokenizer_path"] = absolute_path(ti.tokenizer_path);
    spec.root_attrs.push_back({"text", t.dump()});
  }
  if (const image::Spec* pre = in.preprocess()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();  // in pipeline order
    for (const auto& [k, v] : pre->describe()) j[k] = v;
    spec.root_attrs.push_back({"preprocess", j.dump()});
  }
  if (plan.sharded) {
    spec.root_attrs.push_back({"job_fingerprint", fp.job_hash});
    spec.root_attrs.push_back({"job_fingerprint_json", fp.job.dump()});
    spec.root_attrs.push_back({"shard_index", int64_t{opts.shard_index}});
    spec.root_attrs.push_back({"shard_count", int64_t{opts.shard_count}});
    spec.root_attrs.push_back({"job_row_start", plan.job_begin});
    spec.root_attrs.push_back({"job_row_end", plan.job_end});
  }
  for (std::size_t i = 0; i < encoders.size(); ++i) {
    const auto& enc = *encoders[i];
    const JournalEncoder& je = journal.encoders[enc.name()];
    cache::EmbeddingSource src;
    src.name = enc.name();
    src.raw_path = journal.raw(enc.name());
    src.row_shape = encoding.row_shape(i);
    src.dtype = opts.dtype;
    src.attrs = {{"encoder_path", absolute_path(enc.path())},
                 {"encoder_sha256", enc_sha[i]},
                 {"features", json(in.per_encoder.at(enc.name())).dump()},
                 {"output", enc.output()},
                 {"inference", je.inference},
                 {"optimize_max_abs_diff", je.optimize_max_abs_diff},
                 {"precision", precision_choices().name(opts.precision)},
                 {"math_mode", precision::math_mode(device)},
                 {"precision_max_rel_diff", je.precision_max_rel_diff}};
    spec.embeddings.push_back(src);
    std::vector<int64_t> shape{plan.rows()};
    shape.insert(shape.end(), src.row_shape.begin(), src.row_shape.end());
    result.encoders.push_back(
        {enc.name(), shape, je.inference, je.optimize_max_abs_diff, precision::math_mode(device)});
  }
  cache::assemble(spec);
}

}  // namespace

FillResult run_fill(const FillOptions& opts, const FillCallbacks& cb) {
  auto t_start = Clock::now();
  validate_options(opts);
  torch::Device device = encode::parse_device(opts.device);
  precision::allow_tf32(opts.tf32);
  precision::check(opts.precision, device, "--precision");
  encode::configure_threads(opts.threads);
  Inputs in = open_inputs(opts);
  const RowPlan plan = plan_rows(opts, in.rows);
  const std::string out = plan.sharded ? shard_path(opts.out, opts.shard_index, opts.shard_count) : opts.out;
  // One run per output at a time: a second one would share the journal and publish torn rows.
  files::OutputLock lock(out, "cache-fill");

  FillResult result;
  result.out = out;
  result.rows = plan.rows();
  result.length_window = in.unit > opts.batch_size ? in.unit : 0;
  // Encoders: digests first, so that a missing file is reported before a load error.
  std::vector<std::string> enc_sha, encoder_names;
  for (const auto& e : opts.encoders) enc_sha.push_back(sha256_file(e.path));
  auto t_load = Clock::now();
  std::vector<std::unique_ptr<encode::Encoder>> encoders;
  for (const auto& e : opts.encoders) {
    encoders.push_back(std::make_unique<encode::Encoder>(e.name, e.path, device, e.output));
    encoder_names.push_back(e.name);
  }
  result.model_setup_seconds = seconds_since(t_load);
  for (const auto& [key, t] : in.texts) result.utf8_replaced += t.col->utf8_replaced();
  if (result.utf8_replaced > 0 && cb.warn)
    cb.warn(std::to_string(result.utf8_replaced) +
            " ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)");
  if (in.labels && !in.labels->col->warning().empty() && cb.warn) cb.warn(in.labels->col->warning());
  auto t_digest = Clock::now();
  const Fingerprint fp = compute_fingerprint(opts, in, plan, enc_sha, device);
  result.digest_seconds = seconds_since(t_digest);
  result.fingerprint = fp.hash;

  const std::string partial = partial_path(out);
  if (auto old = up_to_date_cache(out, fp, opts.force)) {
    std::error_code ec;
    fs::remove_all(partial, ec);  // left over from a run killed after its rename
    result.status = FillStatus::up_to_date;
    for (const auto& e : old->embeddings)
      result.encoders.push_back({e.name, e.shape, e.inference, 0, e.math_mode.empty() ? "ieee" : e.math_mode});
    result.seconds = seconds_since(t_start);
    return result;
  }

  Journal journal = open_journal(partial, fp, encoder_names, plan.rows(), in.unit, opts);
  journal.fingerprint = fp.hash;
  journal.fingerprint_json = fp.text;
  result.resumed_from = journal.committed_rows;
  Encoding encoding(opts, in, encoders, journal, result, cb);
  bool encoded = false;  // every row is in the journal: a failure from here on must not discard it
  try {
    if (!encoding.run(plan)) {
      result.status = FillStatus::interrupted;
      result.partial_path = partial;
      result.rows = journal.committed_rows;
      result.seconds = seconds_since(t_start);
      return result;
    }
    encoding.close();
    encoded = true;
    auto t_publish = Clock::now();
    publish(out, opts, in, plan, fp, encoders, enc_sha, encoding, journal, device, result);
    std::error_code ec;
    fs::remove_all(partial, ec);
    result.publish_seconds = seconds_since(t_publish);
  } catch (...) {
    // Progress is kept when it exists and the failure is one a later run can get past (a full
    // disk, an output in the way), and always once every row is encoded (a failure while
    // publishing loses no encoding work); anything else discards it. Every exception counts.
    encoding.abandon();
    Exit code = Exit::internal;
    try {
      throw;
    } catch (const Error& e) {
      code = e.code();
    } catch (...) {
    }
    const bool resumable = journal.committed_rows > 0 &&
                           (encoded || code == Exit::io || code == Exit::cant_create || code == Exit::temp_failure);
    if (!resumable) {
      std::error_code ec;
      fs::remove_all(partial, ec);
      throw;
    }
    try {
      throw;
    } catch (const Error& e) {
      throw Error(e.code(), "", std::string(e.what()) + "; progress kept in " + partial + " (run again to resume)");
    } catch (const std::exception& e) {
      throw Error(
          Exit::internal, "",
          std::string("internal error: ") + e.what() + "; progress kept in " + partial + " (run again to resume)");
    }
  }
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::fill
