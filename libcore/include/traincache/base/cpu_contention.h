// Whether other processes competed for this process's cores while it worked, measured from the
// kernel's per-thread scheduler statistics (/proc/self/task/*/schedstat: time on a CPU and time
// runnable but waiting for one). Torch-free. docs/performance.md, "Busy machines".
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace traincache {

/// One thread's scheduler totals since it started, in seconds.
struct ThreadTimes {
  long tid = 0;
  double running = 0;  ///< on a CPU
  double waiting = 0;  ///< runnable, waiting on a run queue for a CPU
};

/// The threads of this process now; empty where the kernel keeps no scheduler statistics.
std::vector<ThreadTimes> read_thread_times();

/// What a watched span measured.
struct CpuContention {
  bool measured = false;       ///< false: the kernel keeps no statistics, or nothing was sampled
  unsigned cores = 1;          ///< cores the process may use (usable_cores)
  double seconds = 0;          ///< the span's wall time
  double running_seconds = 0;  ///< the process's threads on a CPU, summed
  double waiting_seconds = 0;  ///< runnable and waiting for a CPU, summed
  /// Of that, the wait inferred to be for other processes: waited while the process ran on fewer
  /// threads than `cores` (the kernel does not say who held the CPU).
  double inferred_others_seconds = 0;
  double others_cores = 0;  ///< the cores other processes held on average, of `cores`
  /// Other processes held the cores for a share of the run worth saying: the threads waited at
  /// least 0.5 s and at least a quarter of their running time for cores that others held.
  bool competed() const;
};

/// Sums the intervals between samples of a process's threads. A thread's wait counts as caused by
/// other processes only for the part of an interval in which the process itself left some of its
/// cores unused: its own threads outnumbering its cores is not another process's doing. Pure.
class ContentionMeter {
 public:
  explicit ContentionMeter(unsigned cores);
  /// Adds the interval of `seconds` between two samples of the same process. Threads present in
  /// only one of them count from zero (started) or not at all (ended).
  void add(const std::vector<ThreadTimes>& before, const std::vector<ThreadTimes>& after, double seconds);
  CpuContention result() const;

 private:
  CpuContention c_;
  bool any_ = false;
};

/// Samples this process's threads every `interval_ms` on a thread of its own, from construction
/// until `stop()`; the destructor stops it too. Besides the whole span it keeps what the last
/// complete window of `window_ms` measured (recent()), for notes while the run goes on.
class CpuContentionWatch {
 public:
  explicit CpuContentionWatch(int interval_ms = 200, int window_ms = 3000);
  ~CpuContentionWatch();
  CpuContentionWatch(const CpuContentionWatch&) = delete;
  CpuContentionWatch& operator=(const CpuContentionWatch&) = delete;
  /// Ends the watch (one last sample) and returns what it measured; later calls return the same.
  CpuContention stop();
  /// What the last complete window measured (`measured` false before the first ends). Thread-safe.
  CpuContention recent() const;

 private:
  void sample();
  void loop(int interval_ms);
  ContentionMeter meter_, window_;
  double window_seconds_ = 0, window_length_ = 3;
  CpuContention recent_;
  std::vector<ThreadTimes> last_;
  std::chrono::steady_clock::time_point last_at_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<CpuContention> result_;
  std::thread thread_;
};

/// The closing note for a run that `competed()`: "other processes competed for the cores: ...",
/// ending with `remedy` (none when empty); empty when it did not.
std::string contention_note(const CpuContention& c, const std::string& remedy);

/// The note a progress line carries while other processes hold the cores (`recent`, a watch's last
/// window, competed()): "slowed: others hold 1.6 of 2 cores", then "; " and `remedy` when there is
/// one; empty otherwise.
std::string slowed_note(const CpuContention& recent, const std::string& remedy);

}  // namespace traincache
