// SmartCache (the running-window cache of NVIDIA Clara / MONAI), torch-free: N prepared items stay
// in memory, each epoch trains on them, and a background replacer prepares the next R = ceil(N*r)
// items while the epoch runs; at the epoch boundary the window moves by R, wrapping around the
// dataset order. Used by smart-bench; the items are opaque byte buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace traincache::smart {

/// The window arithmetic, separate from any threads.
struct WindowPlan {
  int64_t dataset_len = 0;
  int64_t cache_num = 0;    ///< N, clamped to the dataset length
  int64_t replace_num = 0;  ///< R = ceil(N * r); 0 when the window holds the whole dataset

  /// Positions in the dataset order of epoch e's window: [e*R, e*R + N) modulo the length.
  std::vector<int64_t> window(int64_t epoch) const;
  /// Positions the replacer prepares during epoch e, which enter the window at epoch e + 1.
  std::vector<int64_t> incoming(int64_t epoch) const;
  /// Epochs after which every position has been in a window at least once.
  int64_t epochs_to_cover() const;
};

/// Builds a plan. cache_num <= 0, replace_rate <= 0 or > 1, or an empty dataset -> Error(usage).
WindowPlan make_plan(int64_t dataset_len, int64_t cache_num, double replace_rate);

/// Prepares the deterministic part of dataset item `index` (read + deterministic transform).
using Prepare = std::function<std::vector<unsigned char>(int64_t index)>;

/// The cache with its replacer threads. Not copyable; the destructor shuts down and frees memory.
class SmartCache {
 public:
  /// `order` maps positions to dataset indices (a seeded shuffle of the dataset, or the identity).
  SmartCache(WindowPlan plan, std::vector<int64_t> order, Prepare prepare, int replace_workers);
  ~SmartCache();
  SmartCache(const SmartCache&) = delete;
  SmartCache& operator=(const SmartCache&) = delete;

  /// Prepares the first window (with the worker threads) and starts preparing the next items.
  void start();
  /// Dataset indices of the current window.
  std::vector<int64_t> window_indices() const;
  /// The prepared item for a dataset index of the current window (throws Error(internal) otherwise).
  const std::vector<unsigned char>& item(int64_t dataset_index) const;
  /// Moves the window by R at an epoch boundary. Waits for the replacer only if it is late and
  /// returns the seconds it waited (the time training was blocked).
  double advance();
  /// The epoch the window belongs to (0 after start()).
  int64_t epoch() const { return epoch_; }
  /// Bytes held by the window and by prepared incoming items.
  uint64_t bytes_cached() const;
  /// Stops the replacer (a prepare in progress finishes; no new one starts), joins the threads and
  /// releases every item. Idempotent.
  void shutdown();

 private:
  void worker();
  void schedule(int64_t epoch);

  WindowPlan plan_;
  std::vector<int64_t> order_;
  Prepare prepare_;
  int workers_;
  int64_t epoch_ = 0;
  std::map<int64_t, std::vector<unsigned char>> window_;  // dataset index -> item
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> queue_;                              // dataset indices still to prepare
  std::map<int64_t, std::vector<unsigned char>> incoming_;  // prepared, not yet in the window
  int64_t pending_ = 0;                                     // queued or being prepared
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace traincache::smart
