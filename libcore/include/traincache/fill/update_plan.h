// The pure stage of cache-fill --update: which rows of the new input an existing cache already
// holds (same key, same input digest), which it must encode, and what changed. Torch-free, so unit
// tests cover it without LibTorch (docs/cache-fill.md, "When the data changes").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/content_hash.h"

namespace traincache::fill {

/// The rows of a cache, or of an input, as an update compares them: each row's key (empty: rows
/// are matched by position) and the digest of its input bytes.
struct RowIdentity {
  std::vector<std::string> keys;
  std::vector<Digest128> digests;
  /// Where the rows are named files: each file's digest without its name (empty: none). With them
  /// on both sides, a row moves to the one cache row of its file's bytes: renamed files are copied.
  std::vector<Digest128> files;
};

/// What an update found for a row of the new input.
enum class RowFate : uint8_t {
  kept,            ///< same key (or place) and digest: copied
  changed,         ///< same key (or place), another digest: encoded
  added,           ///< a key (or place) the cache lacks: encoded
  ambiguous,       ///< a key that is not unique in the cache or the input: encoded
  skipped_before,  ///< kept, but the cache had skipped it (--on-error skip): encoded
  moved,           ///< found by its digest in another cache row: copied from there
  copy,            ///< as moved, from a cache row that a kept or an earlier moved row also has
};
/// The fate's name in --json and --changes: "kept", "changed", "added", "ambiguous",
/// "skipped_before", "moved", "copy".
const char* fate_name(RowFate fate);

/// What an update does with each row of the new input, and what changed since the cache was made.
struct UpdatePlan {
  bool by_key = false;          ///< rows matched by key (otherwise by position)
  std::vector<int64_t> source;  ///< per new row: the cache row whose embeddings it keeps, or -1
  /// By the data: unchanged (same key, same digest: copied, or encoded again when skipped before),
  /// changed (same key, another digest), added (a key the cache lacks), removed (a key of the cache
  /// the input lacks).
  int64_t unchanged = 0, changed = 0, added = 0, removed = 0;
  /// Keys that are not unique in the cache or the input: such rows are encoded again.
  int64_t ambiguous = 0;
  /// Unchanged rows the cache had skipped (--on-error skip): read and encoded again.
  int64_t skipped_before = 0;
  /// Rows that match no cache row by key (or, by position, not the one in their place) whose
  /// content (row digest, or file digest where both sides have them) a cache row had: that row is
  /// copied (a renamed file, a row moved by an insertion above it; of cache rows that share the
  /// content, the first). Counted here, not as added or changed.
  int64_t moved = 0;
  /// Such rows whose cache row a kept row, or a moved row before them, also has (a copy of a file
  /// the input still holds): copied as well, counted here and not as moved.
  int64_t copies = 0;
  std::vector<RowFate> fate;  ///< per new row
  /// Per new row: the cache row its key (or place) found, -1 for none or an ambiguous key.
  std::vector<int64_t> found;
  /// The cache rows no new row has: by key, those whose key the input lacks; by position, those
  /// past the input's end. Ascending.
  std::vector<int64_t> removed_rows;
};

/// Matches `now` (the new input's rows) with `old` (the cache's rows, `old_skipped` the cache rows
/// it skipped). With keys on both sides a row is found by key, otherwise by position; a row found
/// so with another digest, or not found, is then found by its digest (moved, or a copy). A kept row
/// keeps its cache row unless that row was skipped (encoded again: it fails or reads as before);
/// a key that occurs more than once on either side matches nothing. Error(internal) when a side's
/// keys and digests differ in number.
UpdatePlan match_rows(const RowIdentity& old, const std::vector<int64_t>& old_skipped, const RowIdentity& now);

/// The rows of the new input (from 0) that an update encodes, ascending: every row that keeps no
/// cache row (added, changed, ambiguous, or skipped by the cache). The others are copied.
std::vector<int64_t> rows_to_encode(const UpdatePlan& plan);

/// True when two fingerprint documents differ only in what an update absorbs without encoding the
/// cache's rows again: the input's data (its rows, content digest and the row counts of its
/// columns), its labels and keys (added, changed or removed: written anew, the embeddings copied),
/// and the batching (--batch-size, --length-window: an encoded row then differs from the one a full
/// fill gives it by the encoder's batch noise at most). Anything else (encoders, preprocessing,
/// other options, a feature column's dtype or row shape) needs a full fill. False when either is
/// not JSON.
bool only_data_changed(const std::string& old_json, const std::string& now_json);

}  // namespace traincache::fill
