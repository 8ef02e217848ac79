#include "prepare.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/json_text.h"
#include "traincache/base/sha256.h"
#include "traincache/fill/update_plan.h"
#include "traincache/model/precision.h"
#include "traincache/text/tokenizer.h"

using nlohmann::json;

namespace traincache::fill {

std::string partial_path(const std::string& out) { return out + ".partial"; }

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

namespace {

// The run's fingerprint (its inputs' content digest, and with one field to digest each row's digest).
Fingerprint compute_fingerprint(const FillRun& run) {
  const FillOptions& opts = run.opts;
  const Inputs& in = run.in;
  const RowPlan& plan = run.plan;
  ContentHash content;
  Fingerprint f;
  // One field to digest row by row: its row digests come from the content digest's read of it.
  const bool one_field = in.features.size() + in.texts.size() == 1;
  if (one_field) f.row_digests.resize(static_cast<std::size_t>(plan.end - plan.begin));
  if (one_field) f.file_digests.resize(f.row_digests.size());
  auto digest = [&](const io::source::Column& col) {
    if (!one_field)
      col.digest(plan.begin, plan.end, content);
    else if (!col.digest_rows_and_files(plan.begin, plan.end, content, f.row_digests.data(), f.file_digests.data()))
      f.file_digests.clear();
  };
  for (const auto& [name, d] : in.features) digest(*d.col);
  for (const auto& [key, t] : in.texts) digest(*t.col);
  for (const auto& l : in.labels) l.in.col->digest(plan.begin, plan.end, content);
  if (in.keys) in.keys->col->digest(plan.begin, plan.end, content);
  json& fp = f.doc;
  fp["format_version"] = io::cache::kFormatVersion;
  // No path: the inputs count by their content (names relative to the input and bytes), so the same
  // files named another way ('shards/*.tar' for '{0..4}.tar') or moved elsewhere are up to date.
  for (const auto& [name, d] : in.features) fp["input"]["features"][name] = describe_json(d, opts.input);
  fp["input"]["labels"] = json(nullptr);
  for (std::size_t i = 0; i < in.labels.size(); ++i) {
    const LabelInput& l = in.labels[i];
    json j = describe_json(l.in, opts.input);
    j["name"] = l.spec.source;
    if (l.spec.named) j["column"] = l.spec.name;  // else the name follows from the source
    if (i == 0)
      fp["input"]["labels"] = j;  // as caches with one label column had it
    else
      fp["input"]["label_columns"].push_back(j);
  }
  fp["input"]["keys"] = in.keys ? describe_json(*in.keys, opts.input) : json(nullptr);
  if (in.keys) fp["input"]["keys"]["name"] = in.source.keys;
  if (const io::image::Spec* spec = in.preprocess())
    for (const auto& [k, v] : spec->describe()) fp["preprocess"][k] = v;
  fp["input"]["rows"] = {plan.begin, plan.end};
  fp["input"]["content_xxh3"] = content.hex_digest();
  for (std::size_t i = 0; i < opts.encoders.size(); ++i) {
    const auto& e = opts.encoders[i];
    fp["encoders"][e.name] = {
        {"sha256", run.enc_sha[i]}, {"features", in.per_encoder.at(e.name)}, {"output", e.output}};
    if (!in.per_encoder_text.at(e.name).empty()) fp["encoders"][e.name]["text"] = in.per_encoder_text.at(e.name);
  }
  if (!in.texts.empty()) fp["text"] = text_json(opts, in);
  fp["options"] = {{"input_scale", opts.input_scale},
                   {"dtype", dtype_name(opts.dtype)},
                   {"batch_size", opts.batch_size},
                   {"optimize", opts.optimize},
                   {"device_type", run.cuda ? "cuda" : "cpu"}};
  if (opts.on_error == OnError::skip) fp["options"]["on_error"] = "skip";  // absent: fail (older caches)
  if (opts.precision != Precision::fp32) fp["options"]["precision"] = model::precision_choices().name(opts.precision);
  // int8's weight range (absent: 127, int8 caches filled before it was recorded): rows of another
  // range are other values, which a resume or an update must not mix in.
  if (opts.precision == Precision::int8) fp["options"]["int8_weight_max"] = model::kInt8WeightMax;
  // TF32 rows differ from full-float32 ones: a resume must not mix them (absent: ieee, older caches).
  // model::math_mode(device) once LibTorch runs with --tf32's setting.
  if (run.cuda && opts.tf32) fp["options"]["math_mode"] = "tf32";
  // nvJPEG's pixels differ from libjpeg-turbo's (absent: decoded on the host, or on a CPU device by
  // the same code, which gives the same bytes).
  if (run.cuda && in.decode_on_device()) fp["options"]["decode"] = kDecodeNvjpeg;
  if (in.unit > opts.batch_size) {  // absent: batches as read
    fp["options"]["length_window"] = in.unit;
    fp["options"]["max_tokens"] = in.max_tokens;
  }
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

// Error(data) naming what is wrong when the cache at `out` fails cache-inspect --check (its
// structure, what its fingerprint promises, finite values): a cache is called up to date, and an
// update copies rows from it, only when --check accepts it.
void refuse_damaged(const std::string& out, const FillOptions& opts) {
  const io::cache::CheckReport report = io::cache::check(out);
  if (report.ok()) return;
  std::string first = report.problems.front();
  if (first.rfind(out + ": ", 0) == 0) first.erase(0, out.size() + 2);
  const auto more = report.problems.size() - 1;
  throw Error(Exit::data, out,
              "the cache is damaged (" + first +
                  (more ? "; " + std::to_string(more) + " more: cache-inspect --check lists them" : "") +
                  "); use --force" + (opts.update ? " instead of --update" : "") + " to fill it again");
}

// The refusal of a fill over a cache merged from shards: what differs between the merged cache's
// job (its shards' common fingerprint) and this run's, the number of shards aside (and for --update
// the job's rows); nothing when it is this job's. (A comparison of the fingerprints themselves named every part of
// them.)
Error merged_in_the_way(const std::string& out, const io::cache::CacheInfo& old, const Fingerprint& fp,
                        const FillOptions& opts) {
  nlohmann::json was = nlohmann::json::parse(old.job_fingerprint_json, nullptr, false), now = fp.job;
  if (was.is_object()) {
    was.erase("shards");
    now.erase("shards");
    if (opts.update && was["input"].is_object() && now["input"].is_object()) {  // rows are what an update takes
      was["input"].erase("job_rows");
      now["input"].erase("job_rows");
    }
  }
  const std::string whose = !was.is_object() ? "another job (changed: an unreadable job fingerprint)"
                            : was == now
                                ? "this job"
                                : "another job (changed: " + fingerprint_diff(json_text(was), json_text(now)) + ")";
  return Error(Exit::cant_create, out,
               "is a cache merged from shards (cache-fill merge) of " + whose +
                   (opts.update ? ": --update keeps rows only when the encoders, preprocessing and options are "
                                  "unchanged; use --force to fill it again"
                                : ": use --force to fill it again in one process, or run the job's shards to find "
                                  "them up to date"));
}

// A merged cache's job fingerprint as a one-process fill of the job's rows has it (the shards'
// count left out, the job's rows as the input's), so that --update compares it as a fill's.
std::string as_one_process(const io::cache::CacheInfo& merged) {
  auto job = nlohmann::json::parse(merged.job_fingerprint_json, nullptr, false);
  if (!job.is_object() || !job.contains("input") || !job["input"].is_object()) return merged.fingerprint_json;
  job.erase("shards");
  job["input"]["rows"] = job["input"]["job_rows"];
  job["input"].erase("job_rows");
  return json_text(job);
}

// Error(cant_create) when another file is in the way, or a cache that this run may not replace;
// Error(data) when the cache is this run's, or one to update, but damaged.
Existing checked_cache(const std::string& out, const Fingerprint& fp, const FillOptions& opts) {
  std::optional<io::cache::CacheInfo> old;
  try {
    old = io::cache::read_info(out, false);
  } catch (const Error& e) {
    // Why, where the reader says more than that (a merged cache's missing shard, a newer format).
    std::string why = e.what();
    if (why.rfind(out + ": ", 0) == 0) why.erase(0, out.size() + 2);
    throw Error(Exit::cant_create, out,
                "exists and is not a readable traincache cache (" + why + "); use --force to overwrite it");
  }
  if (old->fingerprint == fp.hash) {
    refuse_damaged(out, opts);
    return {old, std::nullopt, ""};
  }
  const bool merged = old->kind == io::cache::CacheKind::merged;
  const std::string was = merged ? as_one_process(*old) : old->fingerprint_json;
  const std::string changed = "exists with another fingerprint (changed: " + fingerprint_diff(was, fp.text) + ")";
  // A merged cache is updated by one process, as a fill of the job's rows would be.
  if (merged && opts.shard_count <= 1 && !(opts.update && only_data_changed(was, fp.text)))
    throw merged_in_the_way(out, *old, fp, opts);
  const bool this_shard = old->kind == io::cache::CacheKind::shard && opts.shard_count == old->shard_count &&
                          opts.shard_index == old->shard_index;
  if (old->kind == io::cache::CacheKind::shard && !this_shard)
    throw Error(Exit::cant_create, out,
                changed + ": is shard " + std::to_string(old->shard_index) + " of " + std::to_string(old->shard_count) +
                    " of a sharded job (cache-fill --shard); fill it with --shard " + std::to_string(old->shard_index) +
                    "/" + std::to_string(old->shard_count) +
                    " and merge the job again, or use --force to overwrite it");
  if (!old->complete || !only_data_changed(was, fp.text))
    throw Error(Exit::cant_create, out,
                changed + (opts.update ? ": --update keeps rows only when the encoders, preprocessing and options "
                                         "are unchanged; use --force to encode every row"
                                       : "; use --force to overwrite it"));
  if (!opts.update && this_shard)  // --update does not take shards
    throw Error(Exit::cant_create, out, changed + "; use --force to encode the shard's rows again");
  if (!opts.update)
    throw Error(Exit::cant_create, out,
                changed +
                    ": only the input's data, labels, keys or batch size changed; use --update to encode only the new "
                    "and changed rows, or --force to encode every row");
  if (!old->row_digests)
    throw Error(Exit::cant_create, out,
                "holds no row digests (made before cache-fill kept them, or merged from shards before 2026-12-04), so "
                "--update cannot tell which rows changed; use --force to encode every row");
  refuse_damaged(out, opts);
  refuse_batch_dependent(*old);
  return {std::nullopt, old, ""};
}

// The cache at `out` as this run finds it: up to date, one to update, or none (a fill). With
// --update --force a cache the update would refuse (73: options, encoders or preprocessing
// changed, not a cache, not updatable; 65: damaged) is filled again, Existing::refill saying why.
Existing existing_cache(const std::string& out, const Fingerprint& fp, const FillOptions& opts) {
  struct stat st;
  if (stat(out.c_str(), &st) != 0 || (opts.force && !opts.update)) return {};
  try {
    return checked_cache(out, fp, opts);
  } catch (const Error& e) {
    if (!opts.force || (e.code() != Exit::cant_create && e.code() != Exit::data)) throw;
    std::string why = e.what();
    if (why.rfind(out + ": ", 0) == 0) why.erase(0, out.size() + 2);
    for (const char* remedy : {"; use --force", ": --update keeps rows only when"})
      if (auto at = why.find(remedy); at != std::string::npos) why.resize(at);
    Existing refill;
    refill.refill = why;
    return refill;
  }
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
  for (const auto& l : in.labels) warnings.insert(l.in.col->warning());
  if (in.keys) warnings.insert(in.keys->col->warning());
  for (const auto& w : warnings)
    if (!w.empty() && cb.warn) cb.warn(w);
  return replaced;
}

}  // namespace

FillRun prepare_fill(const FillOptions& opts, const FillCallbacks& cb, const std::function<void()>& sure_to_encode) {
  FillRun p(opts, cb);
  p.t_start = Clock::now();
  p.cuda = model::parse_device_spec(opts.device).cuda;
  p.in = open_inputs(opts);
  p.device_convert = plan_conversion(opts, p.cuda, p.in);
  p.in.readers = reader_threads(opts, p.in);
  p.plan = plan_rows(opts, p.in.rows, p.in.groups);
  p.out = p.plan.sharded ? shard_path(opts.out, opts.shard_index, opts.shard_count) : opts.out;
  // One run per output at a time: a second one would share the journal and publish torn rows.
  p.lock = std::make_unique<files::OutputLock>(p.out, "cache-fill");
  if (const int left = p.lock->stale_removed(); left > 0 && cb.warn)
    cb.warn(p.out + ": removed " + std::to_string(left) + " temporary file(s) beside it that a killed run had left");
  // Not before: a refusal until here (a missing input, another run's lock) answers at once, where
  // it would wait for what the hook started (a LibTorch load) to finish.
  struct stat st;
  if (sure_to_encode && (opts.force || stat(p.out.c_str(), &st) != 0)) sure_to_encode();
  // The tokenizers after it, beside the load: parsing a tokenizer.json is the longest step until
  // here (MiniLM's 466 KB: ~20 ms), and a file that cannot be parsed is refused as rarely as it
  // is met (a missing one was refused by its digest above).
  load_tokenizers(p.in);

  // The encoders' digests are enough to tell whether the cache is up to date: they are loaded after,
  // from the same files as they were when digested (load_encoders checks), or the fingerprint could
  // name one model over another's rows.
  for (const auto& e : opts.encoders) {
    p.enc_ids.push_back(files::identity(e.path));
    p.enc_sha.push_back(sha256_file(e.path));
    files::require_unchanged(e.path, p.enc_ids.back(), "while its digest was computed");
    p.encoder_names.push_back(e.name);
  }
  p.utf8_replaced = warn_about_inputs(p.in, cb);
  auto t_digest = Clock::now();
  p.fp = compute_fingerprint(p);
  p.digest_seconds = seconds_since(t_digest);

  p.partial = partial_path(p.out);
  p.existing = existing_cache(p.out, p.fp, opts);
  if (!p.existing.refill.empty() && p.cb.warn)
    p.cb.warn(p.out + ": every row is encoded again: " + p.existing.refill + " (--update --force)");
  if (p.up_to_date()) files::remove_tree(p.partial);  // left over from a run killed after its rename
  return p;
}

// ---- stage: an update's plan ------------------------------------------------------------------

// The rows of the cache to update that the new input's rows keep (by key when both have keys of the
// same source), the rows the encode loop then reads, and the entry the new cache's history gets.
// Without a cache to update, a full fill's entry and rows.
void plan_update(FillRun& run, EncodePlan& planned) {
  const std::optional<io::cache::CacheInfo>& old = run.existing.to_update;
  const Inputs& in = run.in;
  const RowPlan& plan = run.plan;
  Provenance& prov = planned.prov;
  planned.rows = plan;
  io::cache::HistoryEntry entry;
  entry.run = old ? "update" : "fill";
  entry.rows = plan.rows();
  if (!old) {
    entry.encoded = plan.rows();
    prov.history.push_back(entry);
    return;
  }
  RowIdentity now;
  now.digests = prov.digests;
  now.files = prov.file_digests;
  if (in.keys && old->keys_source == in.keys->col->info().name)
    now.keys = key_bytes(*in.keys->col, plan.begin, plan.end);
  planned.update = std::make_unique<Update>(*old, std::move(now));
  const Update* update = planned.update.get();
  const UpdatePlan& up = update->plan();
  const auto encoded = static_cast<int64_t>(update->rows_to_encode().size());
  entry.encoded = encoded;
  entry.update =
      io::cache::HistoryEntry::Update{plan.rows() - encoded,          up.added, up.changed, up.removed, up.unchanged,
                                      up.by_key ? "key" : "position", up.moved, up.copies};
  prov.history = old->history;
  prov.history.push_back(entry);
  planned.update_in = update->encoded_inputs(in, plan.begin);
  planned.rows = RowPlan{0, planned.update_in.rows, 0, planned.update_in.rows, false};
}

// ---- stage: the journal ---------------------------------------------------------------------

// A damaged journal under --update: its message names the remedy that keeps the command as it is,
// removing the progress directory (or --update --force); the cache at --out is not touched by it.
[[noreturn]] void refuse_damaged_journal(const FillRun& p, const Error& e) {
  std::string why = e.what();
  const std::string force = std::string("; ") + kJournalRemedy;
  if (!p.opts.update || e.code() != Exit::data || why.size() < force.size() ||
      why.compare(why.size() - force.size(), force.size(), force) != 0)
    throw e;
  why.resize(why.size() - force.size());
  throw Error(Exit::data, "", why + "; rm -r " + p.partial + " discards it (--update then starts this update over)");
}

// The journal in the run's progress directory: adopted only when the directory is private to this
// user and the journal validates against this run (the rows the encode loop reads: an update's
// rows to encode, whose plan Update::identity names). With --force, a foreign, damaged or other
// run's journal is discarded instead of refused; with --update, so is the progress of an update
// whose input has changed again since (it cannot resume: it was encoding rows of another plan).
Journal open_journal(const FillRun& p, const EncodePlan& planned) {
  const FillOptions& opts = p.opts;
  const std::string update_of = planned.update ? planned.update->identity() : "";
  auto start_over = [&] {
    if (int e = files::remove_tree(p.partial))
      throw Error(Exit::cant_create, p.partial, "cannot discard it: " + errno_text(e));
    files::make_or_adopt_private_dir(p.partial);
    return Journal(p.partial);
  };
  try {
    files::make_or_adopt_private_dir(p.partial);
  } catch (const Error&) {
    if (!opts.force) throw;
    return start_over();
  }
  Journal journal(p.partial);
  try {
    if (!journal.load()) return journal;
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) refuse_damaged_journal(p, e);
    return start_over();
  }
  const bool same = journal.fingerprint == p.fp.hash && journal.update_of == update_of;
  if (!same && opts.update && (!journal.update_of.empty() || only_data_changed(journal.fingerprint_json, p.fp.text))) {
    if (p.cb.warn)
      p.cb.warn(p.partial + ": discarded the progress of " +
                (journal.update_of.empty() ? "an interrupted fill of other input data"
                                           : "an earlier update, whose input or cache has changed since") +
                " (" + std::to_string(journal.committed_rows) + " rows)");
    return start_over();
  }
  if (!same) {
    const std::string changed = journal.fingerprint_json.empty() || journal.fingerprint == p.fp.hash
                                    ? ""
                                    : " (changed: " + fingerprint_diff(journal.fingerprint_json, p.fp.text) + ")";
    if (!opts.force)
      throw Error(Exit::cant_create, p.partial,
                  "holds progress of a run with another fingerprint" + changed + "; use --force" +
                      (opts.update ? " (without --update)" : "") + " to discard it");
    return start_over();
  }
  try {
    // A commit ends a unit the encode loop reads: batches, cut short where a tar file ends.
    std::vector<int64_t> unit_ends;
    const RowPlan& plan = planned.rows;
    const Inputs& in = planned.encoded_in(p.in);
    for (const auto& [first, n] : unit_ranges(plan.begin, plan.end, in.unit, in.groups))
      unit_ends.push_back(first + n - plan.begin);
    journal.validate(p.encoder_names, unit_ends, dtype_size(opts.dtype));
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) refuse_damaged_journal(p, e);
    return start_over();
  }
  return journal;
}

namespace {

// --update where the progress directory holds an interrupted fill of exactly this input (a --force
// fill stopped before it published): that fill resumes instead, so that its committed rows are
// kept, and publishes what it would have. Anything else there is left to open_journal.
void resume_fill_over_update(FillRun& p) {
  struct stat st;
  if (!p.existing.to_update || lstat(p.partial.c_str(), &st) != 0) return;
  Journal journal(p.partial);
  try {
    files::make_or_adopt_private_dir(p.partial);
    if (!journal.load()) return;
  } catch (const Error&) {
    return;
  }
  if (journal.fingerprint != p.fp.hash || !journal.update_of.empty() || journal.committed_rows <= 0) return;
  if (p.cb.warn)
    p.cb.warn(p.partial + ": resuming an interrupted fill of this input (" + std::to_string(journal.committed_rows) +
              " of " + std::to_string(p.plan.rows()) + " rows encoded) instead of updating " + p.out +
              ": it replaces the cache with every row encoded again");
  p.existing.to_update.reset();
}

}  // namespace

EncodePlan& plan_encoding(FillRun& p) {
  resume_fill_over_update(p);
  EncodePlan planned(p.partial);
  auto t_digest = Clock::now();
  planned.prov.digests = !p.fp.row_digests.empty() || p.plan.rows() == 0
                             ? std::move(p.fp.row_digests)
                             : row_digests(p.in, p.plan.begin, p.plan.end, p.in.readers);
  planned.prov.file_digests = std::move(p.fp.file_digests);
  planned.prov.digest_inputs = row_digest_inputs(p.in);
  plan_update(p, planned);
  planned.digest_seconds = seconds_since(t_digest);

  planned.journal = open_journal(p, planned);
  Journal& journal = planned.journal;
  journal.fingerprint = p.fp.hash;
  journal.fingerprint_json = p.fp.text;
  journal.update_of = planned.update ? planned.update->identity() : "";
  if (planned.update && journal.committed_rows == 0) journal.encoders = planned.update->encoders();
  planned.resumed_from = journal.committed_rows;
  return p.planned.emplace(std::move(planned));
}

void discard_unstarted(const FillRun& p) {
  if (p.planned && p.planned->journal.committed_rows == 0) files::remove_tree(p.partial);
}

}  // namespace traincache::fill
