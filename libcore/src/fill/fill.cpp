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
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "encoding.h"
#include "inputs.h"
#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/json_text.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/sha256.h"
#include "traincache/base/timing.h"
#include "traincache/base/version.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/journal.h"
#include "traincache/fill/update_plan.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/source.h"
#include "traincache/model/encode.h"
#include "traincache/model/precision_torch.h"
#include "traincache/text/tokenizer.h"
#include "update.h"

using nlohmann::json;

namespace traincache::fill {

std::string partial_path(const std::string& out) { return out + ".partial"; }

namespace {

using files::absolute_path;

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
                     const RowPlan& plan, const Inputs& in, const FillOptions& opts) {
  auto start_over = [&] {
    if (int e = files::remove_tree(partial))
      throw Error(Exit::cant_create, partial, "cannot discard it: " + errno_text(e));
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
    // A commit ends a unit the encode loop reads: batches, cut short where a tar file ends.
    std::vector<int64_t> unit_ends;
    for (const auto& [first, n] : unit_ranges(plan.begin, plan.end, in.unit, in.groups))
      unit_ends.push_back(first + n - plan.begin);
    journal.validate(encoder_names, unit_ends, dtype_size(opts.dtype));
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) throw;
    return start_over();
  }
  return journal;
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
  // No path: the inputs count by their content (names relative to the input and bytes), so the same
  // files named another way ('shards/*.tar' for '{0..4}.tar') or moved elsewhere are up to date.
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
  if (opts.precision != Precision::fp32) fp["options"]["precision"] = model::precision_choices().name(opts.precision);
  // TF32 rows differ from full-float32 ones: a resume must not mix them (absent: ieee, older caches).
  if (std::string(model::math_mode(device)) == "tf32") fp["options"]["math_mode"] = "tf32";
  if (in.unit > opts.batch_size) fp["options"]["length_window"] = in.unit;  // absent: batches as read
  f.text = json_text(fp);
  f.hash = sha256_hex(f.text);
  f.job = fp;
  f.job["input"].erase("rows");
  f.job["input"].erase("content_xxh3");
  f.job["input"]["job_rows"] = {plan.job_begin, plan.job_end};
  f.job["shards"] = opts.shard_count;
  f.job_hash = sha256_hex(json_text(f.job));
  return f;
}

// ---- stage: an existing cache ----------------------------------------------------------------

// The cache already at the output: up to date (this fingerprint), or to update (--update, and only
// the input's data changed); neither when there is none (or --force).
struct Existing {
  std::optional<cache::CacheInfo> up_to_date, to_update;
};

// Error(cant_create) when another file is in the way, or a cache that this run may not replace.
Existing existing_cache(const std::string& out, const Fingerprint& fp, const FillOptions& opts) {
  struct stat st;
  if (stat(out.c_str(), &st) != 0 || opts.force) return {};
  std::optional<cache::CacheInfo> old;
  try {
    old = cache::read_info(out, false);
  } catch (const Error&) {
    throw Error(Exit::cant_create, out, "exists and is not a readable traincache cache; use --force to overwrite it");
  }
  if (old->complete && old->fingerprint == fp.hash) return {old, std::nullopt};
  const std::string changed =
      "exists with another fingerprint (changed: " + fingerprint_diff(old->fingerprint_json, fp.text) + ")";
  if (opts.update && old->fingerprint_json.find("\"job_fingerprint\"") != std::string::npos)
    throw Error(Exit::cant_create, out,
                "is a cache merged from shards (cache-fill merge): --update keeps the rows of a cache filled by "
                "one process; use --force to fill it again");
  if (!old->complete || !only_data_changed(old->fingerprint_json, fp.text))
    throw Error(Exit::cant_create, out,
                changed + (opts.update ? ": --update keeps rows only when the encoders, preprocessing and options "
                                         "are unchanged; use --force to encode every row"
                                       : "; use --force to overwrite it"));
  if (!opts.update)
    throw Error(Exit::cant_create, out,
                changed +
                    ": only the input's data changed; use --update to encode only the new and changed rows, "
                    "or --force to encode every row");
  if (!old->row_digests)
    throw Error(Exit::cant_create, out,
                "holds no row digests (made before cache-fill kept them, or by cache-fill merge), so --update cannot "
                "tell which rows changed; use --force to encode every row");
  return {std::nullopt, old};
}

// ---- stage: publish --------------------------------------------------------------------------

// The cache's root attributes: where its rows came from and how they were made.
cache::Attrs root_attrs(const FillOptions& opts, const Inputs& in, const RowPlan& plan, const Fingerprint& fp,
                        const torch::Device& device) {
  json all_features = json::array();
  for (const auto& [name, d] : in.features) all_features.push_back(name);
  cache::Attrs attrs = {{"created_by", version_banner("cache-fill")},
                        {"fingerprint", fp.hash},
                        {"fingerprint_json", fp.text},
                        {"input_path", source::recorded_path(opts.input)},
                        {"features", json_text(all_features)},
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
    attrs.push_back({"text", json_text(t)});
  }
  if (const image::Spec* pre = in.preprocess()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();  // in pipeline order
    for (const auto& [k, v] : pre->describe()) j[k] = v;
    attrs.push_back({"preprocess", json_text(j)});
  }
  if (plan.sharded) {
    attrs.push_back({"job_fingerprint", fp.job_hash});
    attrs.push_back({"job_fingerprint_json", json_text(fp.job)});
    attrs.push_back({"shard_index", int64_t{opts.shard_index}});
    attrs.push_back({"shard_count", int64_t{opts.shard_count}});
    attrs.push_back({"job_row_start", plan.job_begin});
    attrs.push_back({"job_row_end", plan.job_end});
  }
  return attrs;
}

// What a cache records of its rows' provenance: each row's input digest, and its history (the
// fills and updates that made it, oldest first; no wall-clock time, so that the same inputs give
// the same bytes).
struct Provenance {
  std::vector<Digest128> digests;
  json digest_inputs = json::array();
  json history = json::array();
};

// Builds the HDF5 cache from the journal and renames it into place; fills result.encoders.
void publish(const std::string& out, const FillOptions& opts, const Inputs& in, const RowPlan& plan,
             const Fingerprint& fp, const std::vector<std::unique_ptr<model::Encoder>>& encoders,
             const std::vector<std::string>& enc_sha, const Encoding& encoding, Journal& journal,
             const torch::Device& device, const Provenance& prov, FillResult& result) {
  cache::AssemblySpec spec;
  spec.out_path = out;
  spec.rows = plan.rows();
  spec.row_start = plan.begin;
  if (in.labels) spec.labels = in.labels->col;
  if (in.keys) spec.keys = in.keys->col;
  spec.skipped = journal.skipped;
  result.skipped = static_cast<int64_t>(journal.skipped.size());
  spec.root_attrs = root_attrs(opts, in, plan, fp, device);
  spec.root_attrs.push_back({"history", json_text(prov.history)});
  spec.row_digests = prov.digests;
  spec.row_digest_inputs = json_text(prov.digest_inputs);
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
                 {"features", json_text(json(in.per_encoder.at(enc.name())))},
                 {"output", enc.output()},
                 {"inference", je.inference},
                 {"optimize_max_abs_diff", je.optimize_max_abs_diff},
                 {"precision", model::precision_choices().name(opts.precision)},
                 {"math_mode", model::math_mode(device)},
                 {"precision_max_rel_diff", je.precision_max_rel_diff}};
    spec.embeddings.push_back(src);
    std::vector<int64_t> shape{plan.rows()};
    shape.insert(shape.end(), src.row_shape.begin(), src.row_shape.end());
    result.encoders.push_back({enc.name(), shape, je.inference, je.optimize_max_abs_diff, model::math_mode(device)});
  }
  cache::assemble(spec);
}

// ---- stage: an update's plan ------------------------------------------------------------------

// The rows of `old` that the new input's rows keep (by key when both have keys), and the entry the
// new cache's history gets; result.update says what changed. Without `old`, a full fill's entry.
std::unique_ptr<Update> plan_update(const std::optional<cache::CacheInfo>& old, const Inputs& in, const RowPlan& plan,
                                    const std::vector<Digest128>& digests, Provenance& prov, FillResult& result) {
  json entry = {{"run", old ? "update" : "fill"}, {"rows", plan.rows()}};
  if (!old) {
    entry["encoded"] = plan.rows();
    prov.history.push_back(entry);
    return nullptr;
  }
  RowIdentity now;
  now.digests = digests;
  if (in.keys) now.keys = key_bytes(*in.keys->col, plan.begin, plan.end);
  auto update = std::make_unique<Update>(*old, std::move(now));
  const UpdatePlan& up = update->plan();
  auto units = unit_ranges(plan.begin, plan.end, in.unit, in.groups);
  for (auto& unit : units) unit.first -= plan.begin;  // the plan's rows count from 0
  FillResult::Update u{up.by_key, up.kept, up.changed, up.added, up.removed, update->copied_rows(units), 0};
  result.update = u;
  entry["encoded"] = plan.rows() - u.copied;
  entry["copied"] = u.copied;
  entry["matched_by"] = up.by_key ? "key" : "position";
  for (const auto& [k, v] : {std::pair<const char*, int64_t>{"kept", u.kept},
                             {"changed", u.changed},
                             {"added", u.added},
                             {"removed", u.removed}})
    entry[k] = v;
  prov.history = json::parse(old->history, nullptr, false);
  if (!prov.history.is_array()) prov.history = json::array();
  prov.history.push_back(entry);
  return update;
}

// What the inputs say their user should be told, each once (tar samples left out are said by every
// column); returns the ill-formed UTF-8 sequences replaced in the text fields.
int64_t warn_about_inputs(const Inputs& in, const FillCallbacks& cb) {
  int64_t replaced = 0;
  for (const auto& [key, t] : in.texts) replaced += t.col->utf8_replaced();
  if (replaced > 0 && cb.warn)
    cb.warn(std::to_string(replaced) +
            " ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)");
  std::set<std::string> warnings(in.notes.begin(), in.notes.end());
  for (const auto& [name, d] : in.features) warnings.insert(d.col->warning());
  for (const auto& [key, t] : in.texts) warnings.insert(t.col->warning());
  for (const auto* d : {&in.labels, &in.keys})
    if (*d) warnings.insert((*d)->col->warning());
  for (const auto& w : warnings)
    if (!w.empty() && cb.warn) cb.warn(w);
  return replaced;
}

// Rethrows the failure being handled, after the encode loop stopped. Progress is kept when it exists
// and the failure is one a later run can get past (a full disk, an output in the way, running out
// of memory: the rerun, perhaps elsewhere, resumes), and always once every row is encoded (a
// failure while publishing loses no encoding work); anything else discards it. Every exception
// counts. Call only inside a catch block.
[[noreturn]] void fail_keeping_progress(const std::string& partial, bool have_rows, bool encoded) {
  Exit code = Exit::internal;
  try {
    throw;
  } catch (const Error& e) {
    code = e.code();
  } catch (const std::bad_alloc&) {
    code = Exit::unavailable;
  } catch (...) {
  }
  const bool resumable = have_rows && (encoded || code == Exit::io || code == Exit::cant_create ||
                                       code == Exit::temp_failure || code == Exit::unavailable);
  if (!resumable) {
    files::remove_tree(partial);
    throw;
  }
  const std::string kept = "; progress kept in " + partial + " (run again to resume)";
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), "", std::string(e.what()) + kept);
  } catch (const std::bad_alloc&) {
    throw Error(Exit::unavailable, "", "out of memory: an allocation failed" + kept);
  } catch (const std::exception& e) {
    throw Error(Exit::internal, "", std::string("internal error: ") + e.what() + kept);
  }
}

// A finished run's closing figures: its seconds, the encode time an update saved, and which stage
// bounded it (`readers`: --workers).
void close_timings(FillResult& r, Clock::time_point t_start, int readers) {
  if (r.update && r.rows_encoded > 0)
    r.update->seconds_saved =
        r.encode_seconds / static_cast<double>(r.rows_encoded) * static_cast<double>(r.rows_copied);
  r.seconds = seconds_since(t_start);
  FillTimings t;
  t.busy = r.stage_seconds;
  t.readers = std::max(1, readers);
  t.rows = r.rows_encoded;
  t.seconds = r.seconds;
  t.loop_seconds = r.loop_seconds;
  t.model_setup_seconds = r.model_setup_seconds;
  t.digest_seconds = r.digest_seconds;
  t.publish_seconds = r.publish_seconds;
  r.bottleneck = find_bottleneck(t);
}

// The encoders, loaded on `device`; the time it took in result.model_setup_seconds.
std::vector<std::unique_ptr<model::Encoder>> load_encoders(const FillOptions& opts, const torch::Device& device,
                                                           FillResult& result) {
  auto t_load = Clock::now();
  std::vector<std::unique_ptr<model::Encoder>> encoders;
  for (const auto& e : opts.encoders)
    encoders.push_back(std::make_unique<model::Encoder>(e.name, e.path, device, e.output));
  result.model_setup_seconds = seconds_since(t_load);
  return encoders;
}

}  // namespace

FillResult run_fill(const FillOptions& opts, const FillCallbacks& cb) {
  auto t_start = Clock::now();
  validate_options(opts);
  torch::Device device = model::parse_device(opts.device);
  model::allow_tf32(opts.tf32);
  model::check_precision(opts.precision, device, "--precision");
  model::configure_threads(opts.threads);
  Inputs in = open_inputs(opts);
  const bool device_convert = plan_conversion(opts, device, in);
  const RowPlan plan = plan_rows(opts, in.rows, in.groups);
  const std::string out = plan.sharded ? shard_path(opts.out, opts.shard_index, opts.shard_count) : opts.out;
  // One run per output at a time: a second one would share the journal and publish torn rows.
  files::OutputLock lock(out, "cache-fill");

  FillResult result;
  result.out = out;
  result.rows = plan.rows();
  result.length_window = in.unit > opts.batch_size ? in.unit : 0;
  result.device_convert = device_convert;
  // The encoders' digests are enough to tell whether the cache is up to date: they are loaded after.
  std::vector<std::string> enc_sha, encoder_names;
  for (const auto& e : opts.encoders) {
    enc_sha.push_back(sha256_file(e.path));
    encoder_names.push_back(e.name);
  }
  result.utf8_replaced = warn_about_inputs(in, cb);
  auto t_digest = Clock::now();
  const Fingerprint fp = compute_fingerprint(opts, in, plan, enc_sha, device);
  result.digest_seconds = seconds_since(t_digest);
  result.fingerprint = fp.hash;

  const std::string partial = partial_path(out);
  const Existing existing = existing_cache(out, fp, opts);
  if (const auto& old = existing.up_to_date) {
    files::remove_tree(partial);  // left over from a run killed after its rename
    result.status = FillStatus::up_to_date;
    for (const auto& e : old->embeddings)
      result.encoders.push_back({e.name, e.shape, e.inference, 0, e.math_mode.empty() ? "ieee" : e.math_mode});
    result.seconds = seconds_since(t_start);
    return result;
  }
  auto encoders = load_encoders(opts, device, result);
  t_digest = Clock::now();
  Provenance prov;
  prov.digests = row_digests(in, plan.begin, plan.end, std::max(1, opts.workers));
  prov.digest_inputs = row_digest_inputs(in);
  const std::unique_ptr<Update> update = plan_update(existing.to_update, in, plan, prov.digests, prov, result);
  result.digest_seconds += seconds_since(t_digest);

  Journal journal = open_journal(partial, fp, encoder_names, plan, in, opts);
  journal.fingerprint = fp.hash;
  journal.fingerprint_json = fp.text;
  result.resumed_from = journal.committed_rows;
  Encoding encoding(opts, in, encoders, journal, result, cb, update.get());
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
    publish(out, opts, in, plan, fp, encoders, enc_sha, encoding, journal, device, prov, result);
    files::remove_tree(partial);
    result.publish_seconds = seconds_since(t_publish);
  } catch (...) {
    encoding.abandon();
    fail_keeping_progress(partial, journal.committed_rows > 0, encoded);
  }
  close_timings(result, t_start, opts.workers);
  return result;
}

}  // namespace traincache::fill
