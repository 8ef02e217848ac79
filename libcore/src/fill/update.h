// cache-fill's engine, --update: the rows an existing cache already holds, copied instead of
// encoded (the pure matching is update_plan.h). docs/cache-fill.md, "When the data changes".
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inputs.h"
#include "traincache/base/content_hash.h"
#include "traincache/fill/fill.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/journal.h"
#include "traincache/fill/update_plan.h"
#include "traincache/io/cache_file.h"

namespace traincache::fill {

/// The digest of each input row of [a, b): every feature column and text field the encoders read,
/// in the order of row_digest_inputs() (docs/inputs.md says which bytes each source digests); on
/// up to `threads` threads (columns are safe to read from several).
std::vector<Digest128> row_digests(const Inputs& in, int64_t a, int64_t b, int threads);
/// The columns row_digests() digests, as a JSON list ("features/image", "text/caption|tok.json").
nlohmann::json row_digest_inputs(const Inputs& in);

/// Rows [a, b) of a key column as the bytes that identify them: strings as they are, numbers as
/// their values' bytes.
std::vector<std::string> key_bytes(const io::source::Column& col, int64_t a, int64_t b);
/// A key of key_bytes() as text: a string as it is, an integer in decimal (`numeric` set; uint64
/// above 2^63 wraps, as to_int64 does).
std::string key_text(const std::string& bytes, DType dtype, bool& numeric);

/// What an encoder's batch noise above batch_dependent_share says, for a warning or a refusal:
/// "encoder 'NAME': a row's output depends on the rows batched with it (...)".
std::string batch_dependence(const std::string& encoder, double abs_diff, double rel_diff);

/// Error(cant_create) naming --force when an encoder of the cache `old` measured a batch noise above
/// batch_dependent_share of its values (for a cache from before that share was recorded: of the
/// largest value among its first rows): an update's rows would not be what a full fill gives.
void refuse_batch_dependent(const io::cache::CacheInfo& old);

/// An update of the cache at `path` to a new input: which of its rows each new row keeps, which
/// rows are encoded, and the cache's embeddings the kept rows are copied from when it is published.
class Update {
 public:
  /// `now` holds the new rows' digests and, when the input has keys named as the cache's, their
  /// keys. Error(data) when the cache's keys or digests cannot be read.
  Update(const io::cache::CacheInfo& old, RowIdentity now);

  const UpdatePlan& plan() const { return plan_; }
  const io::cache::CacheInfo& old() const { return old_; }
  /// The rows of the new input (from the run's first) that are encoded, ascending.
  const std::vector<int64_t>& rows_to_encode() const { return rows_to_encode_; }

  /// What the cache's rows were encoded with, as a journal records it (row shape, inference, the
  /// first batch's differences, the batch noise): the encoders' decisions the update's rows follow,
  /// so that every row of the new cache was made the same way.
  std::map<std::string, JournalEncoder> encoders() const;

  /// The cache's embeddings of encoder `name`, which the kept rows are copied from.
  std::shared_ptr<const io::source::Column> embeddings(const std::string& name) const { return embeddings_.at(name); }

  /// What the update is of, for the journal (Journal::update_of): the cache's fingerprint and a
  /// digest of the plan (which cache row each new row keeps), so that only the same update resumes.
  std::string identity() const;

  /// The inputs of `in` that are encoded, as views of only the rows rows_to_encode() (from `begin`, the
  /// run's first row): the encode loop reads them as an input of its own, in full batches.
  Inputs encoded_inputs(const Inputs& in, int64_t begin) const;

  /// FillResult::changes of this update, keys shown as `key_dtype` values (the key columns').
  std::vector<FillResult::RowChange> changes(DType key_dtype) const;

 private:
  io::cache::CacheInfo old_;
  std::vector<std::string> old_keys_, new_keys_;  // as matched (empty: by position)
  UpdatePlan plan_;
  std::vector<int64_t> rows_to_encode_;
  std::map<std::string, std::shared_ptr<const io::source::Column>> embeddings_;
};

}  // namespace traincache::fill
