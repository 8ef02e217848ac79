#include "traincache/base/cpu_contention.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "traincache/base/cores.h"
#include "traincache/base/timing.h"

namespace traincache {

namespace {

// A thread's "running waiting timeslices" line, nanoseconds; nothing when unreadable.
std::optional<ThreadTimes> read_schedstat(long tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  unsigned long long running = 0, waiting = 0;
  if (!(f >> running >> waiting)) return std::nullopt;
  return ThreadTimes{tid, static_cast<double>(running) * 1e-9, static_cast<double>(waiting) * 1e-9};
}

}  // namespace

std::vector<ThreadTimes> read_thread_times() {
  std::vector<ThreadTimes> out;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return out;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (tid <= 0 || *end != '\0') continue;
    if (auto t = read_schedstat(tid)) out.push_back(*t);
  }
  closedir(dir);
  return out;
}

bool CpuContention::competed() const {
  return measured && inferred_others_seconds >= 0.5 && inferred_others_seconds >= 0.25 * running_seconds;
}

ContentionMeter::ContentionMeter(unsigned cores) { c_.cores = std::max(1u, cores); }

void ContentionMeter::add(const std::vector<ThreadTimes>& before, const std::vector<ThreadTimes>& after,
                          double seconds) {
  if (seconds <= 0) return;
  std::unordered_map<long, const ThreadTimes*> was;
  for (const auto& t : before) was[t.tid] = &t;
  double ran = 0, waited = 0;
  for (const auto& t : after) {
    auto it = was.find(t.tid);
    const double r0 = it == was.end() ? 0 : it->second->running, w0 = it == was.end() ? 0 : it->second->waiting;
    ran += std::max(0.0, t.running - r0);
    waited += std::max(0.0, t.waiting - w0);
  }
  const double spare = std::max(0.0, c_.cores * seconds - ran);  // core-seconds the process left unused
  c_.seconds += seconds;
  c_.running_seconds += ran;
  c_.waiting_seconds += waited;
  c_.inferred_others_seconds += std::min(waited, spare);
  any_ = any_ || ran > 0 || waited > 0;
}

CpuContention ContentionMeter::result() const {
  CpuContention c = c_;
  c.measured = any_;
  c.others_cores = c.seconds > 0 ? std::min<double>(c.cores, c.inferred_others_seconds / c.seconds) : 0;
  return c;
}

CpuContentionWatch::CpuContentionWatch(int interval_ms, int window_ms)
    : meter_(usable_cores()), window_(usable_cores()), window_length_(window_ms * 1e-3) {
  last_ = read_thread_times();
  last_at_ = Clock::now();
  if (!last_.empty()) thread_ = std::thread([this, interval_ms] { loop(interval_ms); });
}

CpuContentionWatch::~CpuContentionWatch() { stop(); }

void CpuContentionWatch::sample() {
  auto now = read_thread_times();
  const double seconds = seconds_since(last_at_);
  last_at_ = Clock::now();
  meter_.add(last_, now, seconds);
  window_.add(last_, now, seconds);
  window_seconds_ += seconds;
  if (window_seconds_ >= window_length_) {
    recent_ = window_.result();
    window_ = ContentionMeter(recent_.cores);
    window_seconds_ = 0;
  }
  last_ = std::move(now);
}

CpuContention CpuContentionWatch::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recent_;
}

void CpuContentionWatch::loop(int interval_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stopping_; })) sample();
}

CpuContention CpuContentionWatch::stop() {
  if (result_) return *result_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    sample();
  }
  result_ = meter_.result();
  return *result_;
}

std::string contention_note(const CpuContention& c, const std::string& remedy) {
  if (!c.competed()) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "other processes competed for the cores: this run's threads waited %.1f s for a core "
                "(%.1fx the %.1f s they ran); others held about %.1f of its %u %s on average, so the rates above "
                "are shared; ",
                c.inferred_others_seconds, c.inferred_others_seconds / std::max(c.running_seconds, 1e-9),
                c.running_seconds, c.others_cores, c.cores, c.cores == 1 ? "core" : "cores");
  return remedy.empty() ? std::string(buf, std::strlen(buf) - 2) : buf + remedy;
}

std::string slowed_note(const CpuContention& recent, const std::string& remedy) {
  if (!recent.competed()) return {};
  char buf[96];
  std::snprintf(buf, sizeof buf, "slowed: others hold %.1f of %u %s", recent.others_cores, recent.cores,
                recent.cores == 1 ? "core" : "cores");
  return remedy.empty() ? buf : buf + ("; " + remedy);
}

}  // namespace traincache
