// cache-fill's engine, stages 2 and 3: everything a fill decides before it loads an encoder, without
// LibTorch: the options that need none, the inputs (inputs.h), the rows, the output's lock, the
// fingerprint and the cache already at the output (up to date, to update, or in the way), in one
// FillRun; then the update's plan and the journal. A fill whose cache is up to date ends after
// stage 2, and cache-fill then never loads LibTorch (fill_loader.cpp); every other fill goes on in
// encode_fill (fill.cpp). docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "inputs.h"
#include "traincache/base/files.h"
#include "traincache/base/timing.h"
#include "traincache/fill/fill.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/journal.h"
#include "traincache/io/cache_file.h"
#include "update.h"

namespace traincache::fill {

// Every input byte and every option that changes the stored values, and what all shards of one
// job share (everything but their own rows and digest).
struct Fingerprint {
  nlohmann::json doc, job;
  std::string text, hash, job_hash;
  // Each row's own digest (update.h's row_digests), taken in the same read as the content digest
  // when the rows have one field to digest (an image, a text); empty: taken after, as before.
  std::vector<Digest128> row_digests;
  // With them, where that field is named files (images), each file's digest without its name.
  std::vector<Digest128> file_digests;
};

// The cache already at the output: up to date (this fingerprint), or to update (--update, and only
// the input's data changed); neither when there is none (or --force).
struct Existing {
  std::optional<io::cache::CacheInfo> up_to_date, to_update;
  std::string refill;  ///< --update --force: why the cache there is filled again instead ("": it is not)
};

// What a cache records of its rows' provenance: each row's input digest, and its history (the
// fills and updates that made it, oldest first; no wall-clock time, so that the same inputs give
// the same bytes).
struct Provenance {
  std::vector<Digest128> digests;
  std::vector<Digest128> file_digests;  // where the rows are named files: without the names (or none)
  nlohmann::json digest_inputs = nlohmann::json::array();
  io::cache::History history;
};

struct FillRun;

// What plan_encoding (stage 3) decides of a run: each row's digest and the new cache's history, an
// update's plan, the rows the encode loop reads and their journal. Only plan_encoding makes one,
// so a stage that takes it runs after the planning: the order is the compiler's.
class EncodePlan {
 public:
  Provenance prov;                 // each row's digest, the new cache's history
  std::unique_ptr<Update> update;  // --update of a cache at the output: the rows it keeps
  Inputs update_in;                // an update's rows to encode (Update::encoded_inputs)
  RowPlan rows;                    // the rows the encode loop reads: the run's, or all of update_in's
  Journal journal;                 // the progress directory's journal of those rows
  int64_t resumed_from = 0;        // rows an earlier run had committed to it
  double digest_seconds = 0;       // taking the row digests and planning the update

  // What the encode loop reads: the input's rows (`in`, the run's), or only an update's rows to encode.
  const Inputs& encoded_in(const Inputs& in) const { return update ? update_in : in; }

 private:
  explicit EncodePlan(const std::string& partial) : journal(partial) {}
  friend EncodePlan& plan_encoding(FillRun& run);
};

// One cache-fill run, the single argument of its stages after the options are checked and of the
// module's entry (fill_module.h), as gc-train's stages take its TrainRun. prepare_fill makes it
// (stage 2: inputs, rows, lock, fingerprint, the cache at the output); plan_encoding (stage 3)
// decides its EncodePlan, which the stages after it take too; encode_fill (with LibTorch) encodes
// and publishes.
struct FillRun {
  FillRun(const FillOptions& o, const FillCallbacks& c) : opts(o), cb(c) {}

  const FillOptions& opts;
  const FillCallbacks& cb;
  Clock::time_point t_start;
  bool cuda = false;  // --device names a CUDA device
  Inputs in;
  RowPlan plan;
  std::string out, partial;                 // the output (this shard's), its progress directory
  std::unique_ptr<files::OutputLock> lock;  // one run per output at a time
  std::vector<std::string> enc_sha, encoder_names;
  std::vector<files::Identity> enc_ids;  // each encoder file as its digest read it
  Fingerprint fp;
  Existing existing;
  // What prepare_fill saw that the result reports (result.h writes it).
  bool device_convert = false;  // 8-bit inputs are converted on the encoders' device
  int64_t utf8_replaced = 0;    // ill-formed UTF-8 sequences of the text fields replaced, as warned
  double digest_seconds = 0;    // the fingerprint's read of the input

  // The cache at the output is up to date: nothing is left to do.
  bool up_to_date() const { return existing.up_to_date.has_value(); }

  // plan_encoding's decisions, once made: a CPU fill plans before LibTorch is loaded, a CUDA fill
  // in encode_fill.
  std::optional<EncodePlan> planned;
};

// Options (once validate_options has accepted them), inputs, rows, lock, fingerprint and the
// existing cache, in that order; Error as run_fill. An up-to-date cache ends the fill here (its leftover progress
// directory removed). `sure_to_encode`, when given, is called as soon as the lock is taken if no
// cache can be up to date (none at the output, or --force): before the encoders' digests and the
// fingerprint, which a CUDA fill overlaps with readying its device and a CPU fill with loading
// LibTorch. `opts` and `cb` must outlive the run.
FillRun prepare_fill(const FillOptions& opts, const FillCallbacks& cb,
                     const std::function<void()>& sure_to_encode = {});

// Stage 3, still without LibTorch: each row's digest, the update's plan (plan_update) and the
// journal of the rows to encode (open_journal), so that a journal that cannot be resumed is refused
// before LibTorch is loaded; into run.planned. Error as run_fill.
EncodePlan& plan_encoding(FillRun& run);

// After plan_encoding, when the run stops before the encode loop (LibTorch could not be loaded):
// removes the progress directory when it holds no committed rows, as a failed encode would.
void discard_unstarted(const FillRun& run);

// The rest of run_fill (fill.cpp, with LibTorch): plan_encoding when it has not run, the encoders,
// the encode loop and the publish; the result as fill_result (result.h) makes it.
FillResult encode_fill(FillRun& run);

// An update's plan (update.h): the rows of the cache to update that the input keeps, the rows the
// encode loop then reads, and the new cache's history (into `plan`, whose digests are taken); without
// a cache to update, a full fill's.
void plan_update(FillRun& run, EncodePlan& plan);

// The journal of the rows the encode loop reads (plan's), in the run's progress directory: adopted,
// started, or refused (see prepare.cpp).
Journal open_journal(const FillRun& p, const EncodePlan& plan);

// The text fields and how they are tokenized (fingerprint and the cache's "text" attribute).
nlohmann::json text_json(const FillOptions& opts, const Inputs& in);

}  // namespace traincache::fill
