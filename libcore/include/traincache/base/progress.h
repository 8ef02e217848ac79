// Progress on stderr, never on stdout: a bar redrawn in place when stderr is a terminal (or when
// forced); where it is not (a log file, a CI job), a line now and then once a run takes a while.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "traincache/base/choices.h"

namespace traincache {

/// When to draw progress.
enum class ProgressMode { automatic, always, never };

/// "auto", "always", "never".
const Choices<ProgressMode>& progress_choices();

/// Parses "auto", "always" or "never"; throws Error(usage) otherwise.
ProgressMode parse_progress_mode(const std::string& s);

/// A smoothed rate of items per second from (done, seconds) samples: unknown (0) until two samples
/// at least `interval` seconds apart, then an exponential average (weight `weight` on the newest)
/// of the rates between such samples. The first sample is the baseline, so a bar created when the
/// first item is done does not report that item as done in no time.
class RateMeter {
 public:
  explicit RateMeter(double interval = 0.5, double weight = 0.3) : interval_(interval), weight_(weight) {}
  void sample(int64_t done, double seconds);
  double rate() const { return rate_; }

 private:
  double interval_, weight_, rate_ = 0, base_seconds_ = 0;
  int64_t base_done_ = -1;
};

/// A rate as a bar shows it: "-" while unknown, else three significant digits at most ("0.125",
/// "12.5", "1234").
std::string rate_text(double rate);

/// When a log line is due (stderr not a terminal): never in a run's first `first_after` seconds (a
/// short run's closing line says it all); after that at each tenth of the total reached since the
/// last line, and at least every `every` seconds. `elapsed` and `since_last` are seconds; `decile`
/// is the tenth of the total done at the last line (-1 before any).
bool log_line_due(double elapsed, double since_last, int64_t done, int64_t total, int decile, double first_after = 10,
                  double every = 30);

/// A rate-limited progress display: on a terminal (or --progress=always) one line redrawn in
/// place, "label [####....] done/total  1234 rows/s  ETA 5s"; in automatic mode without a terminal,
/// lines "label: done/total rows (P%)  1234 rows/s  ETA 5s" as log_line_due says.
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
  /// Items per second, smoothed (0 while unknown).
  double rate() const { return meter_.rate(); }

 private:
  void draw(int64_t done, const std::string& extra);
  void log_line(int64_t done, double rate, std::chrono::steady_clock::time_point now, const std::string& extra);

  std::string label_, unit_;
  int64_t total_;
  bool enabled_;
  bool lines_;       // log lines instead of a bar (automatic mode, stderr not a terminal)
  int decile_ = -1;  // the tenth of the total done at the last log line
  bool finished_ = false;
  int64_t last_done_ = 0;
  RateMeter meter_;
  std::chrono::steady_clock::time_point start_, last_draw_, last_line_;
};

}  // namespace traincache
