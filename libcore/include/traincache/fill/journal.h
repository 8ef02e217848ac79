// cache-fill's partial-progress journal: raw embedding files plus journal.json in a private
// directory "<out>.partial". journal.json is replaced atomically after the raw files are fsynced;
// its committed_rows is the only progress a resume trusts. Everything read back is validated
// before it is trusted (docs/design.md, "Faults"). Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/content_hash.h"

namespace traincache::fill {

/// What the journal records of one encoder once its first batch is encoded.
struct JournalEncoder {
  bool has_shape = false;            ///< row_shape is known (set with the first batch)
  std::vector<int64_t> row_shape;    ///< shape of one embedding row ([] for one value per row)
  std::string inference = "plain";   ///< "plain" or "optimized"
  double optimize_max_abs_diff = 0;  ///< largest difference optimised vs plain on the first batch
  /// --precision bf16/fp16: the largest difference from float32 on the first batch, relative to
  /// the largest float32 magnitude (0 with fp32).
  double precision_max_rel_diff = 0;
  /// The largest difference between a row encoded alone and the same row inside the first batch
  /// (the encoder's batch noise; 0: a row's bits do not depend on its batch); negative when not
  /// measured (a first batch of one row).
  double batch_max_abs_diff = -1;
  /// The same relative to the largest magnitude in the first batch's output: a sizable share
  /// (kBatchDependentShare) marks an encoder whose output depends on its batch; negative when not
  /// measured.
  double batch_max_rel_diff = -1;
  /// The committed raw bytes in the pieces each commit added: (end row, XXH3-128 hex of the bytes
  /// of rows [previous end, end)). A resume checks every piece against the raw file.
  std::vector<std::pair<int64_t, std::string>> chunks;
};

/// The journal of one output. Move-only value; files are touched only by the member functions.
class Journal {
 public:
  /// A journal in directory `dir` (nothing is read or created yet).
  explicit Journal(std::string dir) : dir_(std::move(dir)) {}

  /// The directory.
  const std::string& dir() const { return dir_; }
  /// journal.json's path.
  std::string file() const { return dir_ + "/journal.json"; }
  /// The raw file of encoder `name`.
  std::string raw(const std::string& name) const { return dir_ + "/" + name + ".raw"; }

  /// Reads journal.json. False when there is none; a file that is not a well-typed journal ->
  /// Error(data, file(), "journal damaged: ...; --force discards it").
  bool load();

  /// Checks a loaded journal against this run before resuming: committed rows within the run and
  /// at the end of one of its units (`unit_ends`: the row counts, from the run's first row, at which
  /// its batches end, ascending; the last is the run's rows; batches of tar shards end at file
  /// boundaries, so these are not always multiples of the batch size), every encoder known when rows
  /// are committed, every raw file (a regular file, not a link) holding at least the committed rows,
  /// and those rows matching the digests of their chunks. Error(data) as load().
  void validate(const std::vector<std::string>& encoder_names, const std::vector<int64_t>& unit_ends,
                std::size_t element_bytes) const;

  /// Writes journal.json atomically (temporary file, fsync, rename); Error(io) on failure.
  void save() const;

  std::string fingerprint;       ///< the run's fingerprint
  std::string fingerprint_json;  ///< what it was computed from, to name what changed ("" in older journals)
  /// An update's progress: what it updates (the cache's fingerprint and the digest of which rows it
  /// keeps and encodes), so that it resumes only the same plan; "" for a fill.
  std::string update_of;
  int64_t committed_rows = 0;  ///< rows durable in every raw file
  std::map<std::string, JournalEncoder> encoders;
  /// Rows skipped with --on-error skip among the committed ones: (cache row, reason), in order.
  std::vector<std::pair<int64_t, std::string>> skipped;

 private:
  std::string dir_;
};

/// The "journal damaged" error for `file`.
[[noreturn]] void journal_damaged(const std::string& file, const std::string& why);
/// The remedy journal_damaged's message ends with (a run under --update names another).
inline constexpr const char* kJournalRemedy = "--force discards it";

/// Bytes of one row of `row_shape` with elements of `element_bytes`; Error(data) on overflow.
int64_t row_bytes_of(const std::vector<int64_t>& row_shape, std::size_t element_bytes);

/// An encoder's raw file, opened without following links, truncated to the committed bytes and
/// appended to; closed on destruction.
class RawFile {
 public:
  /// Opens (creating) `path` and truncates it to `keep_bytes`; Error(io) on failure.
  RawFile(const std::string& path, int64_t keep_bytes);
  RawFile(RawFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), hash_(std::move(o.hash_)) { o.fd_ = -1; }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  ~RawFile();

  /// Appends every byte; Error(io) naming the journal directory on failure (ENOSPC...).
  void append(const void* data, std::size_t n);
  /// The digest (XXH3-128 hex) of the bytes appended since the last call, for a journal chunk.
  std::string take_digest();
  /// fsync; Error(io) on failure.
  void sync();
  /// Closes now, checking the result; Error(io) on failure.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<ContentHash> hash_;  // of the bytes appended since the last take_digest()
};

}  // namespace traincache::fill
