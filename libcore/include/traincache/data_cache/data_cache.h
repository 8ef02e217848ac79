// gc-train's data cache (--data-cache): the converted rows of a streamed input column kept in a
// shared-memory slab, so that a later epoch, or another process on the node (a data-parallel
// rank, a second run), takes a row from memory instead of reading and converting it again.
// MONAI's CacheDataset (full) and stocaching's fraction of the items (stochastic), on the slot
// protocol of shm-cache: crash-safe and shared. Torch-free: rows are bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "traincache/base/dtype.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::data_cache {

enum class Mode { none, full, stochastic, smart };

/// What --data-cache, --data-cache-limit and --data-cache-keep asked for.
struct Spec {
  Mode mode = Mode::none;
  double fraction = 1;       ///< stochastic: the share of the rows cached (the first ones)
  uint64_t limit_bytes = 0;  ///< stochastic: a byte budget instead of the fraction
  int64_t cache_num = 0;     ///< smart: the window's N rows
  double replace_rate = 0;   ///< smart: r (R = ceil(N r) rows replaced per epoch)
  std::string keep;          ///< slab name kept after the run (and reused); "" = a temporary slab
};

/// Parses "none", "full", "stochastic:F" (0 < F <= 1) or "smart:N,r" (N > 0, 0 < r <= 1);
/// Error(usage, option) otherwise.
Spec parse(const std::string& text, const std::string& option);

/// Hits and misses of one run, summed over the caches of its columns.
struct Stats {
  uint64_t hits = 0, misses = 0, stored = 0;
  uint64_t replaced = 0;                    ///< smart: rows a replacer of this process stored
  uint64_t slots = 0, rows = 0, bytes = 0;  ///< cacheable rows, rows of the columns, slab data bytes
  std::vector<std::string> slabs;

  /// Adds another cache's counts (one run, several columns).
  Stats& operator+=(const Stats& o);
};

/// The slab `want` describes: attached when it exists (its dead writers' slots repaired; it must
/// be this user's unless `trust_owner`, and hold what `want` says: content id, layout, shape,
/// slots), else created, after checking that its `need` bytes fit in the shm directory
/// (Error(cant_create, "--data-cache", ...) before anything is made). `*created` says which.
std::unique_ptr<slab::Slab> open_slab(const slab::CreateOptions& want, uint64_t need, bool trust_owner, bool* created);

/// One column's rows (all of one dtype and shape) in a slab.
class RowCache {
 public:
  /// Attaches to the slab for `content_id` (made for the same column by this or another process:
  /// same shape, same selection) or creates it. The slab is named `spec.keep`, or after the
  /// content ("gc-train-" and 16 hex digits of its SHA-256) and then removed by its creator at the
  /// end. Slots left being written by dead processes are repaired on attach. Errors: a slab that
  /// does not fit in /dev/shm -> Error(cant_create, "--data-cache", ...) before anything is made;
  /// another user's slab unless `trust_owner`, or one made for other contents -> Error(data).
  static std::unique_ptr<RowCache> open(const Spec& spec, const std::string& content_id, uint64_t rows, DType dtype,
                                        const std::vector<uint64_t>& dims, bool trust_owner);
  /// A slab of this process's own (smart-bench's strategies): created as `name` by `tool`,
  /// temporary, removed at the end; an existing slab of that name -> Error(cant_create).
  static std::unique_ptr<RowCache> create_own(const Spec& spec, const std::string& name, const std::string& tool,
                                              uint64_t rows, DType dtype, const std::vector<uint64_t>& dims);
  ~RowCache();
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  std::size_t row_bytes() const { return row_bytes_; }

  /// Copies the cached ones of `rows` into `out` (row k at k * row_bytes()); returns the
  /// positions k of the others, in order. Thread-safe.
  std::vector<std::size_t> lookup(const std::vector<int64_t>& rows, void* out);

  /// Offers row `row` (row_bytes() bytes) to the cache: stored when its slot is free (not
  /// cacheable, filled or being written elsewhere: nothing happens). Thread-safe.
  void store(int64_t row, const void* data);

  /// This process's counts and the slab's shape.
  Stats stats() const;

  /// Bytes of the rows filled so far (by any process).
  uint64_t filled_bytes() const;

 private:
  RowCache() = default;
  // A kept slab whose every slot is filled is sealed with its digest (at the end of the run), and
  // checked against it whenever a later run attaches: bytes changed since are refused.
  void seal_if_complete();
  // The slab's options for `spec` (slots: all rows, the fraction or the budget) and row size.
  static slab::CreateOptions slab_options(const Spec& spec, uint64_t rows, DType dtype,
                                          const std::vector<uint64_t>& dims, std::size_t* row_bytes);
  std::unique_ptr<slab::Slab> slab_;
  std::string name_;
  bool kept_ = false;
  bool remove_at_end_ = false;
  std::size_t row_bytes_ = 0;
  uint64_t rows_ = 0;
  struct Counters;
  std::unique_ptr<Counters> counts_;
};

/// Items made once per node (gc-train's tokenized text sides), and how to store them.
struct SealedItems {
  uint64_t count = 0;                     ///< items
  uint64_t bytes = 0;                     ///< their bytes in all (the slab's arena)
  std::function<void(slab::Slab&)> fill;  ///< stores every item (index i in slot i)
};

/// A variable-layout slab of items made once and then only read, shared by every process on the
/// node: attached when it exists and is sealed (complete; its data is checked against the sealed
/// digest), waited for while another process makes it, else made here. One process at a time
/// makes it (it holds a claim file beside the slabs; a claim or an unsealed slab left by a dead
/// process is taken over), so N ranks tokenize a corpus once, not N times.
class SealedSlab {
 public:
  /// `want`: name, content id, dtype, tool, temporary (removed at the end by the process that
  /// made it); its length, slots and arena come from `make()`. Errors: another user's slab unless
  /// `trust_owner`, one made for other contents, or one whose data changed since it was sealed ->
  /// Error(data); no room in /dev/shm -> Error(cant_create); SIGINT while waiting ->
  /// Error(interrupted); whatever `make()` throws.
  static std::unique_ptr<SealedSlab> open(slab::CreateOptions want, bool trust_owner,
                                          const std::function<SealedItems()>& make);
  ~SealedSlab();
  SealedSlab(const SealedSlab&) = delete;
  SealedSlab& operator=(const SealedSlab&) = delete;

  const slab::Slab& slab() const { return *slab_; }
  /// Whether this process made it (and stored every item).
  bool made() const { return made_; }
  /// `stored`: the items when this process made it; slots, rows and bytes of the slab.
  Stats stats() const;

 private:
  SealedSlab() = default;
  std::unique_ptr<slab::Slab> slab_;
  std::string name_;
  bool made_ = false, remove_at_end_ = false;
};

/// The slab name and content id of a column, from what identifies its converted rows.
std::string content_id(const std::string& parts);

}  // namespace traincache::data_cache
