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

/// An update of the cache at `path` to a new input: which of its rows each new row keeps, and the
/// cache's embeddings to copy them from.
class Update {
 public:
  /// `now` holds the new rows' digests and, when the input has keys, their keys. Error(data) when
  /// the cache's keys or digests cannot be read.
  Update(const io::cache::CacheInfo& old, RowIdentity now);

  const UpdatePlan& plan() const { return plan_; }
  const io::cache::CacheInfo& old() const { return old_; }

  /// What the cache's rows were encoded with, as a journal records it (row shape, inference and
  /// the first batch's differences): the encoders of a run that starts with copied rows.
  std::map<std::string, JournalEncoder> encoders() const;

  /// The embeddings of encoder `name` that new rows [first, first + count) keep, as stored (float32
  /// or float16), [count, row shape...]. Every row must keep one (copied_units). Thread-safe.
  torch::Tensor rows(const std::string& name, int64_t first, int64_t count) const;

  /// Rows copied: every row of the units copied_units() marks.
  int64_t copied_rows(const std::vector<std::pair<int64_t, int64_t>>& units) const;

 private:
  io::cache::CacheInfo old_;
  UpdatePlan plan_;
  std::map<std::string, std::shared_ptr<const io::source::Column>> embeddings_;
};

}  // namespace traincache::fill
