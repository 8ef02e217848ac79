// A progress bar on stderr: drawn only when stderr is a terminal (or when forced), never on stdout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "traincache/choices.h"

namespace traincache {

/// When to draw progress.
enum class ProgressMode { automatic, always, never };

/// "auto", "always", "never".
const Choices<ProgressMode>& progress_choices();

/// Parses "auto", "always" or "never"; throws Error(usage) otherwise.
ProgressMode parse_progress_mode(const std::string& s);

/// A rate-limited single-line progress display: "label [####....] done/total  1234 rows/s  ETA 5s".
class Progress {
 public:
  /// `unit` names what is counted ("rows"). Drawing is decided once, here.
  Progress(std::string label, int64_t total, ProgressMode mode, std::string unit = "rows");
  ~Progress();

  /// Reports `done` items so far; redraws at most ten times a second.
  void update(int64_t done, const std::string& extra = "");
  /// Draws the final state and ends the line (idempotent).
  void finish();
  /// True when this bar draws anything.
  bool enabled() const { return enabled_; }

 private:
  void draw(int64_t done, const std::string& extra);

  std::string label_, unit_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  int64_t last_done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace traincache
