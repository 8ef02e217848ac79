// Busy time of the reader threads' stages, for cache-fill's bottleneck report: code on a reader
// thread times a stage with a StageTimer, which adds to the StageSink bound to that thread; with
// none bound (every other caller of the same code), a timer costs one thread-local load.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "traincache/base/timing.h"

namespace traincache {

/// The stages timed on reader threads. `input` is the whole of each unit's reading; the others are
/// parts of it (what is left of `input` is reading files, datasets and copying rows).
enum class Stage { input, decode, resize, tokenize };
inline constexpr std::size_t kStageCount = 4;

/// Seconds each stage was busy, summed over every thread that measured into this sink.
class StageSink {
 public:
  void add(Stage s, Clock::duration d) {
    busy_[index(s)].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                              std::memory_order_relaxed);
  }
  double seconds(Stage s) const { return static_cast<double>(busy_[index(s)].load(std::memory_order_relaxed)) * 1e-9; }

 private:
  static std::size_t index(Stage s) { return static_cast<std::size_t>(s); }
  std::array<std::atomic<int64_t>, kStageCount> busy_{};
};

namespace detail {
inline thread_local StageSink* bound_stage_sink = nullptr;
}  // namespace detail

/// Binds `sink` to the calling thread while in scope; the previous binding comes back after.
class BindStageSink {
 public:
  explicit BindStageSink(StageSink* sink) : previous_(detail::bound_stage_sink) { detail::bound_stage_sink = sink; }
  ~BindStageSink() { detail::bound_stage_sink = previous_; }
  BindStageSink(const BindStageSink&) = delete;
  BindStageSink& operator=(const BindStageSink&) = delete;

 private:
  StageSink* previous_;
};

/// Adds the time from construction to destruction to `stage` of the calling thread's sink, if any.
class StageTimer {
 public:
  explicit StageTimer(Stage stage) : sink_(detail::bound_stage_sink), stage_(stage) {
    if (sink_) start_ = Clock::now();
  }
  ~StageTimer() {
    if (sink_) sink_->add(stage_, Clock::now() - start_);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  StageSink* sink_;
  Stage stage_;
  Clock::time_point start_{};
};

}  // namespace traincache
