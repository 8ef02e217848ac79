// cache-fill's engine, stage 2: everything a fill decides before it loads an encoder, without
// LibTorch: the options that need none, the inputs (inputs.h), the rows, the output's lock, the
// fingerprint and the cache already at the output (up to date, to update, or in the way). A fill
// whose cache is up to date ends here, and cache-fill then never loads LibTorch
// (fill_loader.cpp); every other fill goes on in encode_prepared (fill.cpp). docs/code-map.md
// shows every stage and the way the data flows.
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
#include "traincache/io/cache_file.h"

namespace traincache::fill {

// Every input byte and every option that changes the stored values, and what all shards of one
// job share (everything but their own rows and digest).
struct Fingerprint {
  nlohmann::json doc, job;
  std::string text, hash, job_hash;
  // Each row's own digest (update.h's row_digests), taken in the same read as the content digest
  // when the rows have one field to digest (an image, a text); empty: taken after, as before.
  std::vector<Digest128> row_digests;
};

// The cache already at the output: up to date (this fingerprint), or to update (--update, and only
// the input's data changed); neither when there is none (or --force).
struct Existing {
  std::optional<io::cache::CacheInfo> up_to_date, to_update;
};

// A fill up to the encoders: what prepare_fill decided, and the result so far.
struct Prepared {
  Clock::time_point t_start;
  bool cuda = false;  // --device names a CUDA device
  Inputs in;
  RowPlan plan;
  std::string out, partial;                 // the output (this shard's), its progress directory
  std::unique_ptr<files::OutputLock> lock;  // one run per output at a time
  std::vector<std::string> enc_sha, encoder_names;
  Fingerprint fp;
  Existing existing;
  FillResult result;  // status up_to_date: nothing is left to do
};

// Options (once validate_options has accepted them), inputs, rows, lock, fingerprint and the
// existing cache, in that order; Error as run_fill. An up-to-date cache ends the fill here (its leftover progress
// directory removed). `sure_to_encode`, when given, is called as soon as the lock is taken if no
// cache can be up to date (none at the output, or --force): before the encoders' digests and the
// fingerprint, which a CUDA fill overlaps with readying its device.
Prepared prepare_fill(const FillOptions& opts, const FillCallbacks& cb,
                      const std::function<void()>& sure_to_encode = {});

// The rest of run_fill (fill.cpp, with LibTorch): the encoders, the journal, the encode loop and
// the publish.
FillResult encode_prepared(const FillOptions& opts, const FillCallbacks& cb, Prepared& p);

// The text fields and how they are tokenized (fingerprint and the cache's "text" attribute).
nlohmann::json text_json(const FillOptions& opts, const Inputs& in);

}  // namespace traincache::fill
