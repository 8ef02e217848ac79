#include "inputs.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <tuple>

#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/sha256.h"
#include "traincache/model/runtime.h"
#include "traincache/text/token_batches.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::fill {

namespace {

// Encoder e's text fields, each opened once per tokenizer (its file digested here, read by
// load_tokenizers).
void open_text(const FillOptions& opts, const EncoderSpec& e, Inputs& in) {
  const InputSource& src = in.source;
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
    text::check_path(tok_path);
    TextInput t{io::source::open_column(src.where, f, src.files, io::source::Role::text), nullptr, f, tok_path,
                sha256_file(tok_path)};
    if (t.col->info().dtype != DType::string || t.col->info().shape.size() != 1)
      throw Error(
          Exit::data, src.where.path,
          "text field '" + f + "' must hold one string per row (a manifest field or a 1-D HDF5 string dataset)");
    in.texts.emplace(key, std::move(t));
  }
}

// Why encoder `name` has no input: for a manifest or tar shards, their fields and the flags that
// name them.
std::string no_features_message(const InputSource& src, const std::string& name) {
  std::string msg = "no input dataset for encoder '" + name + "'";
  if (src.tar)
    return msg + ": name the shards' image field with --features FIELD or their text field with --text FIELD " +
           "(the shards have " + name_list(src.tar->all) + ")";
  const std::string& input = src.where.path;
  if (src.where.kind != io::source::Kind::manifest) return msg;
  std::string fields;
  for (const auto& f : io::source::manifest_fields(input)) fields += (fields.empty() ? "" : ", ") + f;
  return msg + ": name the manifest's image field with --features FIELD or its text field with --text FIELD (" + input +
         " has " + fields + ")";
}

// Every field the options name (--features, --text, --labels, --key): a tar shard's sample without
// one is refused or, with --on-error skip, left out of every column alike.
std::vector<std::string> named_fields(const FillOptions& opts, const InputSource& src) {
  std::vector<std::string> out;
  auto add = [&](const std::vector<std::string>& names) {
    for (const auto& n : names)
      if (!n.empty() && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  add(opts.features);
  add(opts.text);
  for (const auto& e : opts.encoders) {
    add(e.features);
    add(e.text);
  }
  for (const auto& l : src.labels)
    if (l.table.empty()) add({l.source});
  add({src.keys});
  return out;
}

// Tar shards: their fields; the fields every sample must have (the ones the options name); the field
// an encoder without --features reads (the shards' only image field; none when they have none or
// several), added to those every sample must have when an encoder reads it; and a note when the
// shards' cls field is stored nowhere.
void tar_defaults(const FillOptions& opts, InputSource& src) {
  src.tar = io::source::tar_fields(src.where.path);
  const io::source::TarFields& fields = *src.tar;
  io::source::FileOptions& files = src.files;
  files.sample_fields = named_fields(opts, src);
  src.implicit.clear();
  const auto has = [&](const std::string& f) { return std::count(fields.all.begin(), fields.all.end(), f) > 0; };
  if (opts.labels.empty() && has("cls"))
    src.notes.push_back(src.where.path + ": the shards' 'cls' field is not stored (--labels cls stores it as labels)");
  const bool used = std::any_of(opts.encoders.begin(), opts.encoders.end(), [&](const EncoderSpec& e) {
    return (e.features.empty() ? opts.features : e.features).empty() && (e.text.empty() ? opts.text : e.text).empty();
  });
  if (fields.images.size() != 1 || !used) return;
  if (std::find(files.sample_fields.begin(), files.sample_fields.end(), fields.images[0]) == files.sample_fields.end())
    files.sample_fields.push_back(fields.images[0]);
  src.implicit = fields.images[0];
}

// The column that decides the input's rows: its first feature column, else its first text field.
const io::source::Column& first_column(const Inputs& in) {
  return in.features.empty() ? *in.texts.begin()->second.col : *in.features.begin()->second.col;
}

// Column `name` of the input (or a file of its own) for labels or keys, of a dtype the cache stores.
Input stored_column(const InputSource& src, const std::string& name, io::source::Role role) {
  Input d{io::source::open_column(src.where, name, src.files, role)};
  if (d.info().dtype == DType::other)
    throw Error(Exit::data, src.where.path, "dataset '" + name + "' has an unsupported dtype");
  return d;
}

// A key table's only field besides `key` (--labels TABLE without :FIELD).
std::string only_field(const LabelSpec& l) {
  if (io::source::kind_of(l.table) != io::source::Kind::manifest)
    throw Error(Exit::usage, "--labels", l.table + ": name the member to read (" + l.table + ":MEMBER)");
  std::vector<std::string> fields;
  for (const auto& f : io::source::manifest_fields(l.table))
    if (f != "key") fields.push_back(f);
  if (fields.size() != 1)
    throw Error(Exit::usage, "--labels",
                l.table + ": name the field to read (" + l.table + ":FIELD; it has " + name_list(fields) + ")");
  return fields[0];
}

// The keys (--key, or the input's), then every label column: the input's own in its row order, a
// key table's joined on the keys (or on the row numbers without keys).
void open_keys_and_labels(Inputs& in) {
  const InputSource& src = in.source;
  // The input's own label columns before its keys (an image folder's class names before its paths:
  // a folder name that is not UTF-8 is named as such), then the key tables joined on the keys.
  for (const LabelSpec& l : src.labels)
    in.labels.push_back({l, l.table.empty() ? stored_column(src, l.source, io::source::Role::labels) : Input{}});
  if (const std::string& name = src.keys; !name.empty()) {
    in.keys = stored_column(src, name, io::source::Role::value);
    const auto& ki = in.keys->info();
    if (ki.shape.size() != 1 || !(is_integer(ki.dtype) || ki.dtype == DType::string))
      throw Error(Exit::data, src.where.path, "key dataset '" + name + "' must be 1-D integers or strings");
  }
  std::vector<std::string> keys;
  for (LabelInput& li : in.labels) {
    LabelSpec& l = li.spec;
    if (l.table.empty()) continue;
    if (l.field.empty()) l.field = only_field(l);
    if (l.name.empty()) l.name = l.field;
    if (keys.empty())
      keys = io::source::key_texts(in.keys ? in.keys->col.get() : nullptr, first_column(in).info().rows());
    li.in = Input{io::source::joined_on_keys(l.table, l.field, keys, src.files)};
  }
  std::set<std::string> names;
  for (const auto& l : in.labels)
    if (!names.insert(l.spec.name).second)
      throw Error(Exit::usage, "--labels", "two label columns are named '" + l.spec.name + "'; name one NAME=SOURCE");
}

// The columns every encoder reads (--features, or the one array of a .npy file or slab), and the
// labels and keys to copy. A name ending in .npy (or shm:NAME) is a file of its own.
void open_columns(const FillOptions& opts, Inputs& in) {
  const InputSource& src = in.source;
  for (const auto& e : opts.encoders) {
    open_text(opts, e, in);
    auto feats = e.features.empty() ? opts.features : e.features;
    if (feats.empty() && !src.implicit.empty() && in.per_encoder_text[e.name].empty()) feats = {src.implicit};
    if (feats.empty() && !in.per_encoder_text[e.name].empty()) {
      in.per_encoder[e.name] = {};
      continue;
    }
    if (feats.empty()) throw Error(Exit::usage, "--features", no_features_message(src, e.name));
    auto& own = in.per_encoder[e.name];
    for (const auto& f : feats) {
      // Ragged columns (token sequences) are fed after the others, padded per batch like text.
      const std::string ragged = f + "|ragged";
      if (!in.features.count(f) && !in.texts.count(ragged)) {
        Input d{io::source::open_column(src.where, f, src.files, io::source::Role::images)};
        io::source::require_numeric_input(d.info(), src.where.path);
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
  open_keys_and_labels(in);
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

// Token slots a length window's batch may hold (--max-tokens; 0: --batch-size rows each), once
// window_rows has chosen `in.unit`.
int64_t batch_tokens(const FillOptions& opts, const Inputs& in) {
  const bool cuda = opts.device.rfind("cuda", 0) == 0;
  if (in.unit > opts.batch_size)
    return opts.max_tokens >= 0 ? opts.max_tokens : cuda ? text::kDefaultMaxTokensCuda : text::kDefaultMaxTokensCpu;
  if (opts.max_tokens > 0)
    throw Error(Exit::usage, "--max-tokens",
                "caps the batches of texts sorted by length (--length-window), and this fill sorts none");
  return 0;
}

// The label columns of --labels, or the input's default labels (resolve_input says how each is named).
std::vector<LabelSpec> label_specs(const FillOptions& opts, const io::source::Resolved& where) {
  const std::string given = opts.labels.empty() ? where.labels : opts.labels;
  std::vector<LabelSpec> out;
  if (given.empty()) return out;
  std::size_t at = 0;
  while (at <= given.size()) {
    const std::size_t end = std::min(given.find(',', at), given.size());
    const std::string item = given.substr(at, end - at);
    at = end + 1;
    LabelSpec l;
    const std::size_t eq = item.find('=');
    l.named = eq != std::string::npos;
    l.source = eq == std::string::npos ? item : item.substr(eq + 1);
    if (l.named && eq == 0) throw Error(Exit::usage, "--labels", "'" + item + "' names no column");
    if (l.source.empty()) throw Error(Exit::usage, "--labels", "an empty item in '" + given + "'");
    const std::size_t colon = l.source.rfind(':');
    if (colon != std::string::npos && io::source::is_key_table(l.source.substr(0, colon))) {
      l.table = l.source.substr(0, colon);
      l.field = l.source.substr(colon + 1);
    } else if (io::source::is_key_table(l.source)) {
      l.table = l.source;
    }
    l.name = l.named ? item.substr(0, eq) : !l.table.empty() ? l.field : io::source::label_column_name(l.source);
    if (l.name.find('/') != std::string::npos || l.name == "." || l.name == "..")
      throw Error(Exit::usage, "--labels",
                  "'" + l.name + "' cannot name a label column (no '/'; NAME=SOURCE names it)");
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace

InputSource resolve_input(const FillOptions& opts) {
  InputSource src;
  src.where = io::source::resolve(opts.input);
  io::source::require_input(src.where);  // a mistyped --input is 66, before any option about its contents
  src.labels = label_specs(opts, src.where);
  src.keys = opts.keys.empty() ? src.where.keys : opts.keys;
  src.files = opts.files;
  src.files.tolerate_unreadable = opts.on_error == OnError::skip;
  src.files.strict_utf8 = opts.tokenize.strict_utf8;
  src.implicit = src.where.column;
  if (src.where.kind == io::source::Kind::tar) tar_defaults(opts, src);
  return src;
}

Inputs open_inputs(const FillOptions& opts) {
  Inputs in;
  try {
    in.source = resolve_input(opts);
    in.notes = in.source.notes;
    open_columns(opts, in);
  } catch (const io::source::UnreadableFile& e) {  // met probing the images' sizes
    throw Error(e.code(), "", std::string(e.what()) + kSkipHint);
  }
  const io::source::ColumnInfo& first = first_column(in).info();
  in.rows = first.rows();
  in.groups = first_column(in).row_groups();
  if (in.rows == 0) throw Error(Exit::data, opts.input, "dataset '" + first.name + "' has no rows: nothing to encode");
  auto same_rows = [&](const io::source::ColumnInfo& info) {
    if (info.rows() != in.rows)
      throw Error(Exit::data, opts.input,
                  "rows mismatch: '" + first.name + "' has " + std::to_string(in.rows) + " rows but '" + info.name +
                      "' has " + std::to_string(info.rows()));
  };
  for (const auto& [name, d] : in.features) same_rows(d.info());
  for (const auto& [key, t] : in.texts) same_rows(t.col->info());
  for (const auto& l : in.labels) same_rows(l.in.info());
  if (in.keys) same_rows(in.keys->info());
  in.unit = window_rows(opts, in);
  in.max_tokens = batch_tokens(opts, in);
  if (const io::image::Spec* spec = in.preprocess())
    if (std::string note = io::image::padding_note(*spec); !note.empty()) in.notes.push_back(note);
  return in;
}

void load_tokenizers(Inputs& in) {
  std::map<std::string, std::shared_ptr<const text::Tokenizer>> loaded;  // a file read once
  for (auto& [key, t] : in.texts) {
    if (t.tok || t.tokenizer_path.empty()) continue;
    auto& tok = loaded[t.tokenizer_path];
    if (!tok) tok = text::load(t.tokenizer_path);
    t.tok = tok;
  }
}

bool plan_conversion(const FillOptions& opts, bool cuda, Inputs& in) {
  const bool on_device = opts.convert == Convert::device || (opts.convert == Convert::auto_ && cuda);
  if (opts.decode == Decode::device && !on_device && in.preprocess())
    throw Error(Exit::usage, "--decode device",
                "needs the images converted on the device too (--convert device; auto does so on CUDA only)");
  const bool draft = in.preprocess() && in.preprocess()->jpeg_draft;
  if (opts.decode == Decode::device && draft)
    throw Error(Exit::usage, "--decode device", "decodes JPEGs whole: --jpeg-draft's reduced decode is the host's");
  if (opts.decode == Decode::device && cuda && in.preprocess() && !model::nvjpeg_built())
    throw Error(Exit::unavailable, "--decode device",
                "this build has no nvJPEG to decode on CUDA devices (docs/gpu.md, \"Building\")");
  const bool decode =
      opts.decode == Decode::device || (opts.decode == Decode::auto_ && cuda && model::nvjpeg_built() && !draft);
  bool any = false;
  for (auto& [name, d] : in.features)
    if (on_device && (d.col->preprocess() || d.info().dtype == DType::u8)) {
      d.convert_on_device = true;
      d.decode_on_device = decode && d.col->preprocess();
      any = true;
    }
  return any;
}

int reader_threads(const FillOptions& opts, const Inputs& in) {
  if (opts.workers > 0) return opts.workers;
  for (const auto& [name, d] : in.features)
    if (d.col->preprocess() && !d.decode_on_device) return static_cast<int>(std::clamp(usable_cores(), 1u, 4u));
  return 1;
}

// A column for the fingerprint: shape and dtype, and its own file when it is not --input's.
json describe_json(const Input& in, const std::string& input) {
  json j{{"shape", in.info().shape}, {"dtype", dtype_name(in.info().dtype)}};
  // A column of a file of its own (--labels labels.npy) is marked as such; where that file lies is
  // not part of it (its rows are in the content digest).
  if (in.col->path() != input) j["own_file"] = true;
  return j;
}

}  // namespace traincache::fill
