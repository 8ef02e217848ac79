#include "result.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "prepare.h"
#include "traincache/base/cores.h"
#include "traincache/base/timing.h"
#include "traincache/fill/update_plan.h"
#include "traincache/io/image.h"
#include "traincache/text/tokenizer.h"
#include "update.h"

namespace traincache::fill {

namespace {

// What prepare_fill knew of the run: its output, rows, batching, fingerprint and inputs.
void prepared_figures(const FillRun& run, FillResult& r) {
  r.out = run.out;
  r.rows = run.plan.rows();
  r.length_window = run.in.unit > run.opts.batch_size ? run.in.unit : 0;
  r.max_tokens = run.in.max_tokens;
  r.device_convert = run.device_convert;
  r.device_decode = run.in.decode_on_device();
  if (run.in.preprocess()) r.image_simd = io::image::simd_text();
  r.utf8_replaced = run.utf8_replaced;
  for (const auto& [key, t] : run.in.texts)
    if (t.tok) r.max_length = std::max(r.max_length, text::effective_max_length(*t.tok, run.opts.tokenize));
  r.digest_seconds = run.digest_seconds;
  r.fingerprint = run.fp.hash;
  r.refilled = run.existing.refill;
}

// A fill of a new cache under --changes: every row added (and encoded), with its key if it has one.
std::vector<FillResult::RowChange> every_row_added(const Inputs& in, const RowPlan& plan) {
  const std::vector<std::string> keys =
      in.keys ? key_bytes(*in.keys->col, plan.begin, plan.end) : std::vector<std::string>();
  std::vector<FillResult::RowChange> out;
  for (int64_t r = 0; r < plan.rows(); ++r) {
    FillResult::RowChange c;
    c.change = "added";
    c.row = r;
    c.encoded = true;
    if (!keys.empty()) {
      c.key = key_text(keys[static_cast<std::size_t>(r)], in.keys->col->info().dtype, c.numeric_key);
      c.has_key = true;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// What planning decided: an update's changes and the rows it copies, the rows an earlier run
// committed, and the time the row digests took.
void planned_figures(const FillRun& run, const EncodePlan& plan, FillResult& r) {
  r.digest_seconds += plan.digest_seconds;
  r.resumed_from = plan.resumed_from;
  if (!plan.update) {
    if (run.opts.list_changes) r.changes = every_row_added(run.in, run.plan);
    return;
  }
  const Update& update = *plan.update;
  r.changes = update.changes(run.in.keys ? run.in.keys->col->info().dtype : DType::other);
  const UpdatePlan& up = update.plan();
  FillResult::Update u;
  u.by_key = up.by_key;
  u.unchanged = up.unchanged;
  u.changed = up.changed;
  u.added = up.added;
  u.removed = up.removed;
  u.skipped_before = up.skipped_before;
  u.moved = up.moved;
  u.copies = up.copies;
  u.copied = run.plan.rows() - static_cast<int64_t>(update.rows_to_encode().size());
  r.update = u;
  r.rows_copied = u.copied;
}

void tallied_figures(const FillTally& t, FillResult& r) {
  r.rows_encoded = t.rows_encoded;
  r.texts_cut = t.texts_cut;
  r.tokens = t.tokens;
  r.token_slots = t.token_slots;
  r.bytes_written = t.bytes_written;
  r.model_setup_seconds = t.model_setup_seconds;
  r.encode_seconds = t.encode_seconds;
  r.input_wait_seconds = t.input_wait_seconds;
  r.store_seconds = t.store_seconds;
  r.loop_seconds = t.loop_seconds;
  r.publish_seconds = t.publish_seconds;
  r.stage_seconds = t.stage_seconds;
  r.convert_thread = t.convert_thread;
  r.decoded = t.decoded;
}

// The largest difference from a full fill that an update's rows are allowed: kUpdateNoiseFactor
// times the encoders' batch noise as recorded; negative when no encoder's was measured.
double allowed_difference(const Journal& journal) {
  double most = -1;
  for (const auto& [name, je] : journal.encoders) most = std::max(most, je.batch_max_abs_diff);
  return most < 0 ? most : kUpdateNoiseFactor * most;
}

// What lowers a text fill's padding: the options that batch its texts by length.
std::string padding_remedy(const FillOptions& opts, const FillResult& r) {
  if (opts.tokenize.padding == text::Padding::max_length) return "pad each batch to its longest (--padding longest)";
  if (r.length_window > 0) return "fewer token slots per batch (--max-tokens) or longer windows (--length-window)";
  return opts.length_window == 0 ? "sort the texts by length (without --length-window 0)" : "";
}

// A published run's closing figures: the encode time an update saved, and which stage bounded it.
void closing_figures(const FillRun& run, FillResult& r) {
  if (r.update && r.rows_encoded > 0)
    r.update->seconds_saved =
        r.encode_seconds / static_cast<double>(r.rows_encoded) * static_cast<double>(r.rows_copied);
  FillTimings t;
  t.busy = r.stage_seconds;
  t.readers = run.in.readers;
  t.convert_thread = r.convert_thread;
  t.rows = r.rows_encoded;
  t.seconds = r.seconds;
  t.loop_seconds = r.loop_seconds;
  t.model_setup_seconds = r.model_setup_seconds;
  t.digest_seconds = r.digest_seconds;
  t.publish_seconds = r.publish_seconds;
  t.tokens = r.tokens;
  t.token_slots = r.token_slots;
  t.padding_remedy = padding_remedy(run.opts, r);
  if (run.opts.precision == Precision::int8) t.int8_instructions = int8_instructions();
  r.bottleneck = find_bottleneck(t);
}

}  // namespace

FillResult fill_result(const FillRun& run, const FillEnding& end) {
  FillResult r;
  r.status = end.status;
  prepared_figures(run, r);
  if (end.status == FillStatus::up_to_date) {
    for (const auto& e : run.existing.up_to_date->embeddings)
      r.encoders.push_back({e.name, e.shape, e.inference, e.optimize_max_abs_diff,
                            e.math_mode.empty() ? "ieee" : e.math_mode, e.batch_max_abs_diff, e.batch_max_rel_diff,
                            io::cache::precision_of(e), e.precision_max_rel_diff});
    r.seconds = seconds_since(run.t_start);
    return r;
  }
  planned_figures(run, *end.plan, r);
  if (end.tally) tallied_figures(*end.tally, r);
  r.seconds = seconds_since(run.t_start);
  if (end.status == FillStatus::interrupted) {
    r.partial_path = run.partial;
    r.rows = end.plan->journal.committed_rows;
    return r;
  }
  r.encoders = end.published->encoders;
  r.skipped = end.published->skipped;
  if (r.update) r.update->max_abs_diff_expected = allowed_difference(end.plan->journal);
  r.contention = end.contention;
  closing_figures(run, r);
  return r;
}

}  // namespace traincache::fill
