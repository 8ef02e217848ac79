// SmartCache (the running-window cache of NVIDIA Clara / MONAI), torch-free, in a shared-memory
// slab: each epoch trains on a window of N items; a background replacer prepares the next
// R = ceil(N*r) items while the epoch runs; at the epoch boundary the window moves by R, wrapping
// around a dataset order. Used by gc-train (--data-cache smart:N,r) and smart-bench (smart).
//
// Items are addressed by keys: the window of epoch e is keys [e*R, e*R + N), the replacer prepares
// keys [e*R + N, e*R + N + R) during epoch e, and key k stands for the item at position
// k mod dataset_len of the order. Key k lives in slot k mod (N + R) of the slab, tagged with k + 1:
// an incoming item replaces, in place, the one that left the window at the last boundary, and a
// reader that asks for key k never gets another key's bytes (a miss instead; it then prepares the
// item itself). So the cache can be late, shared by several processes (data-parallel ranks), or
// interrupted, and what is trained on stays the same.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "traincache/base/dtype.h"
#include "traincache/data_cache/data_cache.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::data_cache {

/// The window arithmetic, separate from any threads.
struct WindowPlan {
  int64_t dataset_len = 0;
  int64_t cache_num = 0;    ///< N, clamped to the dataset length
  int64_t replace_num = 0;  ///< R = ceil(N * r), at most dataset_len - N (0: the window holds everything)

  /// Positions in the dataset order of epoch e's window: [e*R, e*R + N) modulo the length.
  std::vector<int64_t> window(int64_t epoch) const;
  /// Positions the replacer prepares during epoch e, which enter the window at epoch e + 1.
  std::vector<int64_t> incoming(int64_t epoch) const;
  /// The first key of epoch e's window (e*R); its keys are [first_key, first_key + N).
  int64_t first_key(int64_t epoch) const { return epoch * replace_num; }
  /// Slots of a slab holding the window and the incoming items: N + R.
  int64_t slots() const { return cache_num + replace_num; }
  /// Epochs after which every position has been in a window at least once.
  int64_t epochs_to_cover() const;
};

/// Builds a plan (MONAI's clamping: N to the length, R to what is outside the window).
/// cache_num <= 0, replace_rate <= 0 or > 1, or an empty dataset -> Error(usage).
WindowPlan make_plan(int64_t dataset_len, int64_t cache_num, double replace_rate);

/// --replace-rate in (0, 1], or Error(usage) naming it (make_plan's own check, for callers that check
/// their options before the data is open).
void check_replace_rate(double replace_rate);

/// Prepares items `items` (the values of WindowOptions::items) into `out`, item j at
/// j * item_bytes. Runs on replacer threads; throws to report a failed read.
using Prepare = std::function<void(const std::vector<int64_t>& items, void* out)>;

/// How to open a window cache.
struct WindowOptions {
  WindowPlan plan;
  std::shared_ptr<const std::vector<int64_t>> items;  ///< position -> the item it stands for
  DType dtype = DType::f32;
  std::vector<uint64_t> dims;  ///< one item's shape
  std::string name;            ///< the slab's name
  std::string content_id;      ///< what it holds; another slab of that name holding other contents is refused
  std::string tool;            ///< shown in slab listings
  bool own = false;            ///< create it (temporary; existing name -> Error(cant_create)) instead of
                               ///< attaching to it or creating it
  bool trust_owner = false;    ///< attach to another user's slab
  int part = 0, parts = 1;     ///< this process's replacer prepares keys k with k % parts == part
  int workers = 1;             ///< replacer threads
  std::size_t chunk = 16;      ///< items per Prepare call
};

/// What an epoch boundary found.
struct Boundary {
  int64_t epoch = 0;
  uint64_t late = 0;        ///< items of the new window not prepared when it began
  double wait_seconds = 0;  ///< time begin_epoch waited for this process's share of them (wait mode)
};

/// A window cache with its replacer threads. The destructor stops the replacer and removes the
/// slab when this process created it.
class WindowCache {
 public:
  /// Attaches to (or creates) the slab of N + R slots and starts the replacer threads (idle until
  /// begin_epoch). Errors as data_cache::open_slab.
  static std::unique_ptr<WindowCache> open(const WindowOptions& o, Prepare prepare);
  ~WindowCache();
  WindowCache(const WindowCache&) = delete;
  WindowCache& operator=(const WindowCache&) = delete;

  /// Epoch `e` begins: counts the window's items not ready, drops what is left of the replacer's
  /// previous work, and queues this process's share of the window's missing items, then (with
  /// `prepare_next`) of the items entering at e + 1. With `wait` (MONAI), returns only once the
  /// window's share is prepared; otherwise at once (a missing item is then prepared by whoever
  /// asks for it first). A replacer error is rethrown here.
  Boundary begin_epoch(int64_t e, bool wait, bool prepare_next);

  /// The item key `k` stands for.
  int64_t item_of(int64_t key) const;
  std::size_t item_bytes() const { return item_bytes_; }

  /// Copies the ready ones of `keys` into `out` (key j at j * item_bytes()); returns the positions
  /// j of the others, in order. Thread-safe.
  std::vector<std::size_t> lookup(const std::vector<int64_t>& keys, void* out);
  /// Offers key `key`'s item, prepared by the caller after a miss (stored when its slot is free).
  void store(int64_t key, const void* data);

  /// This process's counts (`replaced`: items its replacer stored) and the slab's shape.
  data_cache::Stats stats() const;
  /// Bytes of the items filled so far (by any process).
  uint64_t filled_bytes() const;

  /// Stops the replacer (a Prepare in progress finishes, its items are dropped) and joins it.
  /// Idempotent.
  void shutdown();

 private:
  WindowCache() = default;
  void worker();
  bool ready(int64_t key) const;

  WindowPlan plan_;
  std::shared_ptr<const std::vector<int64_t>> items_;
  Prepare prepare_;
  std::unique_ptr<slab::Slab> slab_;
  std::string name_;
  bool remove_at_end_ = false;
  std::size_t item_bytes_ = 0, chunk_ = 16;
  int part_ = 0, parts_ = 1;
  int delay_ms_ = 0;  // test hook: TRAINCACHE_TEST_REPLACER_DELAY_MS added to each Prepare call

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    int64_t key;
    bool window;  // part of the current window (begin_epoch's wait waits for these)
  };
  std::deque<Job> queue_;
  uint64_t generation_ = 0;  // begin_epoch calls so far: work of an older one does not count
  int64_t window_pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t hits_ = 0, misses_ = 0, stored_ = 0, replaced_ = 0;  // under mu_
  std::vector<std::thread> threads_;
};

}  // namespace traincache::data_cache
