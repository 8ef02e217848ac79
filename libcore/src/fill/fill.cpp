#include "traincache/fill/fill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/version.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "encoding.h"
#include "inputs.h"
#include "prepare.h"
#include "result.h"
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

namespace {

using files::absolute_path;

// ---- stage: publish --------------------------------------------------------------------------

// The cache's root attributes: where its rows came from and how they were made.
io::cache::Attrs root_attrs(const FillRun& run, const torch::Device& device) {
  const FillOptions& opts = run.opts;
  const Inputs& in = run.in;
  const RowPlan& plan = run.plan;
  const Fingerprint& fp = run.fp;
  json all_features = json::array();
  for (const auto& [name, d] : in.features) all_features.push_back(name);
  io::cache::Attrs attrs = {{"created_by", version_banner("cache-fill")},
                            {"fingerprint", fp.hash},
                            {"fingerprint_json", fp.text},
                            {"input_path", io::source::recorded_path(opts.input)},
                            {"features", json_text(all_features)},
                            {"input_scale", opts.input_scale},
                            {"labels_source", in.source.labels_source()},
                            {"keys_source", in.source.keys},
                            {"input_kind", std::string(io::source::kind_name(in.source.where.kind))},
                            {"device_type", std::string(device.is_cuda() ? "cuda" : "cpu")},
                            {"batch_size", opts.batch_size},
                            {"length_window", in.unit > opts.batch_size ? in.unit : int64_t{0}},
                            {"max_tokens", in.max_tokens}};
  if (!in.texts.empty()) {
    json t = text_json(opts, in);
    for (const auto& [key, ti] : in.texts)
      if (ti.tok) t[key]["tokenizer_path"] = absolute_path(ti.tokenizer_path);
    attrs.push_back({"text", json_text(t)});
  }
  if (const io::image::Spec* pre = in.preprocess()) {
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

// What the journal records of encoder `name` (nothing when it encoded no row: a fill of no rows).
const JournalEncoder& recorded(const Journal& journal, const std::string& name) {
  static const JournalEncoder none;
  auto it = journal.encoders.find(name);
  return it == journal.encoders.end() ? none : it->second;
}

// Encoder i's embeddings as publish() writes them: the journal's raw file, and with an update the
// rows it keeps from the updated cache.
io::cache::EmbeddingSource embedding_source(const FillRun& run, const EncodePlan& planned, std::size_t i) {
  const FillOptions& opts = run.opts;
  const EncoderSpec& e = opts.encoders[i];
  const Journal& journal = planned.journal;
  const JournalEncoder& je = recorded(journal, e.name);
  const torch::Device device = model::parse_device(opts.device);
  io::cache::EmbeddingSource src;
  src.name = e.name;
  src.raw_path = journal.raw(e.name);
  src.row_shape = je.row_shape;
  src.dtype = opts.dtype;
  src.attrs = {{"encoder_path", absolute_path(e.path)},
               {"encoder_sha256", run.enc_sha[i]},
               {"features", json_text(json(run.in.per_encoder.at(e.name)))},
               {"output", e.output},
               {"inference", je.inference},
               {"optimize_max_abs_diff", je.optimize_max_abs_diff},
               {"precision", model::precision_choices().name(opts.precision)},
               {"math_mode", model::math_mode(device)},
               {"precision_max_rel_diff", je.precision_max_rel_diff}};
  if (opts.precision == Precision::int8) src.attrs.push_back({"int8_weight_max", int64_t{model::kInt8WeightMax}});
  if (je.batch_max_abs_diff >= 0) src.attrs.push_back({"batch_max_abs_diff", je.batch_max_abs_diff});
  if (je.batch_max_rel_diff >= 0) src.attrs.push_back({"batch_max_rel_diff", je.batch_max_rel_diff});
  if (planned.update) {
    src.kept_rows = planned.update->plan().source;
    src.kept = planned.update->embeddings(e.name);
  }
  return src;
}

// Builds the HDF5 cache from the journal (and, for an update, the rows it keeps from the updated
// cache) and renames it into place; what it wrote.
Published publish(FillRun& p, const EncodePlan& planned) {
  const FillOptions& opts = p.opts;
  const Inputs& in = p.in;
  const Journal& journal = planned.journal;
  const Update* update = planned.update.get();
  const Provenance& prov = planned.prov;
  Published published;
  io::cache::AssemblySpec spec;
  spec.out_path = p.out;
  spec.rows = p.plan.rows();
  spec.row_start = p.plan.begin;
  for (const auto& l : in.labels)  // source: the column's own name, or a key table's TABLE:FIELD
    spec.labels.push_back({l.spec.name, l.spec.table.empty() ? l.in.info().name : l.spec.source, l.in.col});
  if (in.keys) spec.keys = in.keys->col;
  spec.skipped = journal.skipped;
  if (update)  // the journal counts the rows it encoded: each is a row of the new input
    for (auto& [row, why] : spec.skipped) row = update->rows_to_encode().at(static_cast<std::size_t>(row));
  published.skipped = static_cast<int64_t>(spec.skipped.size());
  const torch::Device device = model::parse_device(opts.device);
  spec.root_attrs = root_attrs(p, device);
  spec.root_attrs.push_back({"history", io::cache::history_text(prov.history)});
  spec.row_digests = prov.digests;
  spec.row_file_digests = prov.file_digests;
  spec.row_digest_inputs = json_text(prov.digest_inputs);
  for (std::size_t i = 0; i < opts.encoders.size(); ++i) {
    spec.embeddings.push_back(embedding_source(p, planned, i));
    const JournalEncoder& je = recorded(journal, opts.encoders[i].name);
    std::vector<int64_t> shape{p.plan.rows()};
    shape.insert(shape.end(), je.row_shape.begin(), je.row_shape.end());
    published.encoders.push_back({opts.encoders[i].name, shape, je.inference, je.optimize_max_abs_diff,
                                  model::math_mode(device), je.batch_max_abs_diff, je.batch_max_rel_diff,
                                  model::precision_choices().name(opts.precision), je.precision_max_rel_diff});
  }
  io::cache::assemble(spec);
  return published;
}

// The failure being handled as the engine reports it (`error`): an Error as it is, running out of
// memory as model::out_of_memory_error (69; `converted`), any other std::exception as an internal
// error; none for anything else. Out of memory is told by model::is_out_of_memory, the one
// classifier, and the failure is classified here once.
struct Failure {
  std::optional<Error> error;
  bool converted = false;
};
Failure classify(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return {e, false};
  } catch (const std::exception& e) {
    if (model::is_out_of_memory(e)) return {model::out_of_memory_error("", e), true};
    return {Error(Exit::internal, "", std::string("internal error: ") + e.what()), false};
  } catch (...) {
    return {};
  }
}

// Rethrows the failure being handled, after the encode loop stopped. Progress is kept when it exists
// and the failure is one a later run can get past (a full disk, an output in the way, running out
// of memory anywhere: in the forward, a host copy, a torch::cat, a reader thread, an update's rows;
// the rerun, perhaps elsewhere, resumes), and always once every row is encoded (a failure while
// publishing loses no encoding work); anything else discards it. Every exception counts. Call only
// inside a catch block.
[[noreturn]] void fail_keeping_progress(const std::string& partial, bool have_rows, bool encoded) {
  const std::exception_ptr failure = std::current_exception();
  const Failure f = classify(failure);
  const Exit code = f.error ? f.error->code() : Exit::internal;
  const bool resumable = have_rows && (encoded || code == Exit::io || code == Exit::cant_create ||
                                       code == Exit::temp_failure || code == Exit::unavailable);
  const std::string kept = resumable ? "; progress kept in " + partial + " (run again to resume)" : "";
  if (!resumable) files::remove_tree(partial);
  // Out of memory is told as such whatever became of the progress; the rest as it came unless kept.
  if (!f.error || (!resumable && !f.converted)) std::rethrow_exception(failure);
  throw Error(f.error->code(), "", std::string(f.error->what()) + kept);
}

// The encoders, loaded on `device`; the time it took in tally.model_setup_seconds.
std::vector<std::unique_ptr<model::Encoder>> load_encoders(const FillRun& run, const torch::Device& device,
                                                           FillTally& tally) {
  const FillOptions& opts = run.opts;
  if (opts.precision == Precision::int8) model::require_int8();  // before any encoder loads
  // Test hook: the window between the encoders' digests and their loads held open this long, so a
  // test can replace a file in it (tests/cli/cache_fill_errors.test.sh).
  if (const char* ms = std::getenv("TRAINCACHE_TEST_ENCODER_LOAD_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  auto t_load = Clock::now();
  std::vector<std::unique_ptr<model::Encoder>> encoders;
  for (std::size_t i = 0; i < opts.encoders.size(); ++i) {
    const auto& e = opts.encoders[i];
    encoders.push_back(std::make_unique<model::Encoder>(e.name, e.path, device, e.output));
    // The module loaded is the file the fingerprint's digest read: not written or replaced since.
    files::require_unchanged(e.path, run.enc_ids.at(i), "between its digest and its load");
    // Converted beside the encode loop's start (its readers, the vocabulary checks) until the
    // first batch's precision check waits for it.
    if (opts.precision == Precision::int8) encoders.back()->start_int8();
  }
  tally.model_setup_seconds = seconds_since(t_load);
  return encoders;
}

}  // namespace

namespace {

// The encode loop over the planned rows into their journal; false when interrupted. The encoders
// are loaded only here, and not at all when every row is committed already (an update that encodes
// nothing). What they measure goes to `tally`.
bool encode_rows(FillRun& run, EncodePlan& planned, FillTally& tally) {
  const RowPlan& plan = planned.rows;
  if (planned.journal.committed_rows >= plan.rows() && (planned.update || plan.rows() > 0)) return true;
  const torch::Device device = model::parse_device(run.opts.device);
  auto encoders = load_encoders(run, device, tally);
  Encoding encoding(run, planned, encoders, tally);
  try {
    if (!encoding.run(plan)) return false;
    encoding.close();
  } catch (...) {
    encoding.abandon();
    throw;
  }
  return true;
}

}  // namespace

FillResult encode_fill(FillRun& p) {
  model::allow_tf32(p.opts.tf32);
  model::configure_threads(p.opts.threads);
  CpuContentionWatch watch;
  EncodePlan& planned = p.planned ? *p.planned : plan_encoding(p);
  FillTally tally;
  Published published;
  bool encoded = false;  // every row is in the journal: a failure from here on must not discard it
  try {
    // Interrupted after the last batch (or while it was stored): stopped before the publish too,
    // as the first signal's notice says; running again publishes.
    if (!encode_rows(p, planned, tally) || interrupt_requested())
      return fill_result(p, FillEnding::interrupted(planned, tally));
    encoded = true;
    auto t_publish = Clock::now();
    published = publish(p, planned);
    files::remove_tree(p.partial);
    tally.publish_seconds = seconds_since(t_publish);
  } catch (...) {
    fail_keeping_progress(p.partial, planned.journal.committed_rows > 0, encoded);
  }
  return fill_result(p, FillEnding::done(planned, tally, published, watch.stop()));
}

FillResult run_fill(const FillOptions& opts, const FillCallbacks& cb) {
  validate_options(opts);
  const torch::Device device = model::parse_device(opts.device);  // one this machine lacks: 69 before any input
  // The device readied beside the fingerprint when the fill is sure to encode, else once it is
  // known not to be up to date (an up-to-date answer never waits for a device it does not use).
  std::optional<model::DeviceWarmup> warm;
  FillRun run = prepare_fill(opts, cb, [&] { warm.emplace(device); });
  if (run.up_to_date()) return fill_result(run, FillEnding::up_to_date());
  if (!warm) warm.emplace(device);
  return encode_fill(run);
}

}  // namespace traincache::fill
