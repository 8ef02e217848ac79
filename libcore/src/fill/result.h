// cache-fill's engine, its last step: the run's FillResult, written here and nowhere else, from
// what the stages decided (the FillRun, its EncodePlan) and what they measured as they went (a
// FillTally, and what publish wrote). docs/code-map.md shows every stage.
#pragma once

#include <cstdint>
#include <vector>

#include "traincache/base/cpu_contention.h"
#include "traincache/fill/bottleneck.h"
#include "traincache/fill/fill.h"

namespace traincache::fill {

struct FillRun;
class EncodePlan;

// What the stages after the planning measure and count as they go: loading the encoders, the
// encode loop's stages and rows, the publish.
struct FillTally {
  int64_t rows_encoded = 0, texts_cut = 0;
  int64_t tokens = 0, token_slots = 0;  // the text fields' tokens encoded, and the slots they took
  uint64_t bytes_written = 0;
  double model_setup_seconds = 0, encode_seconds = 0, input_wait_seconds = 0, store_seconds = 0;
  double loop_seconds = 0, publish_seconds = 0;
  StageSeconds stage_seconds;
  bool convert_thread = false;
  DeviceDecodeStats decoded;
};

// What publish wrote: each encoder's embeddings as the cache holds them, and the rows it records
// as skipped (--on-error skip, the whole cache's).
struct Published {
  std::vector<FillResult::Encoder> encoders;
  int64_t skipped = 0;
};

// How a run ended: up to date after prepare_fill (nothing planned), interrupted in the encode loop,
// or done (published, its cores watched).
struct FillEnding {
  FillStatus status = FillStatus::done;
  const EncodePlan* plan = nullptr;
  const FillTally* tally = nullptr;
  const Published* published = nullptr;
  CpuContention contention;

  static FillEnding up_to_date() { return FillEnding(FillStatus::up_to_date, nullptr, nullptr); }
  static FillEnding interrupted(const EncodePlan& plan, const FillTally& tally) {
    return FillEnding(FillStatus::interrupted, &plan, &tally);
  }
  static FillEnding done(const EncodePlan& plan, const FillTally& tally, const Published& published,
                         const CpuContention& contention) {
    FillEnding e(FillStatus::done, &plan, &tally);
    e.published = &published;
    e.contention = contention;
    return e;
  }

 private:
  FillEnding(FillStatus s, const EncodePlan* p, const FillTally* t) : status(s), plan(p), tally(t) {}
};

// The result of `run` as it ended; its seconds count to this call.
FillResult fill_result(const FillRun& run, const FillEnding& end);

}  // namespace traincache::fill
