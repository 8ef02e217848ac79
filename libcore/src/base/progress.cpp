#include "traincache/base/progress.h"

#include <unistd.h>

#include <cstdio>

#include "traincache/base/error.h"

namespace traincache {

const Choices<ProgressMode>& progress_choices() {
  static const Choices<ProgressMode> c{
      {ProgressMode::automatic, "auto"}, {ProgressMode::always, "always"}, {ProgressMode::never, "never"}};
  return c;
}

ProgressMode parse_progress_mode(const std::string& s) { return progress_choices().parse(s, "--progress"); }

Progress::Progress(std::string label, int64_t total, ProgressMode mode, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(mode == ProgressMode::always || (mode == ProgressMode::automatic && isatty(2))),
      lines_(mode == ProgressMode::automatic && !isatty(2)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(),
      last_line_(start_) {}

bool log_line_due(double elapsed, double since_last, int64_t done, int64_t total, int decile, double first_after,
                  double every) {
  if (elapsed < first_after || (total > 0 && done >= total)) return false;  // the closing line follows
  const int now = total > 0 ? static_cast<int>(10 * done / total) : -1;
  return since_last >= every || (total > 0 && now > decile);
}

void Progress::log_line(int64_t done, double rate, std::chrono::steady_clock::time_point now,
                        const std::string& extra) {
  using secs = std::chrono::duration<double>;
  if (!log_line_due(secs(now - start_).count(), secs(now - last_line_).count(), done, total_, decile_)) return;
  last_line_ = now;
  if (total_ > 0) decile_ = static_cast<int>(10 * done / total_);
  char eta[32] = "";
  if (rate > 0 && total_ > done) std::snprintf(eta, sizeof eta, "  ETA %.0fs", (total_ - done) / rate);
  std::fprintf(stderr, "%s: %lld/%lld %s (%d%%)  %s %s/s%s%s%s\n", label_.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), unit_.c_str(), total_ > 0 ? static_cast<int>(100 * done / total_) : 0,
               rate_text(rate).c_str(), unit_.c_str(), eta, extra.empty() ? "" : "  ", extra.c_str());
  std::fflush(stderr);
}

Progress::~Progress() { finish(); }

void RateMeter::sample(int64_t done, double seconds) {
  if (base_done_ < 0) {
    base_done_ = done, base_seconds_ = seconds;
    return;
  }
  const double dt = seconds - base_seconds_;
  if (dt < interval_ || done < base_done_) return;
  const double now = static_cast<double>(done - base_done_) / dt;
  rate_ = rate_ > 0 ? weight_ * now + (1 - weight_) * rate_ : now;
  base_done_ = done, base_seconds_ = seconds;
}

std::string rate_text(double rate) {
  if (!(rate > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, rate >= 100 ? "%.0f" : rate >= 10 ? "%.1f" : rate >= 1 ? "%.2f" : "%.3g", rate);
  return buf;
}

void Progress::update(int64_t done, const std::string& extra) {
  last_done_ = done;
  auto now = std::chrono::steady_clock::now();
  meter_.sample(done, std::chrono::duration<double>(now - start_).count());
  if (lines_) log_line(done, meter_.rate(), now, extra);
  if (!enabled_) return;
  if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  draw(done, extra);
}

void Progress::draw(int64_t done, const std::string& extra) {
  double rate = meter_.rate();
  if (done >= total_ && total_ > 0) {  // the last line: the whole run's rate, known even for a short one
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (secs > 0) rate = static_cast<double>(done) / secs;
  }
  constexpr int kWidth = 30;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  char eta[32] = "";
  if (rate > 0 && total_ > done) std::snprintf(eta, sizeof eta, "  ETA %.0fs", (total_ - done) / rate);
  std::fprintf(stderr, "\r%s [%s] %lld/%lld  %s %s/s%s%s%s\x1b[K", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), rate_text(rate).c_str(), unit_.c_str(),
               eta, extra.empty() ? "" : "  ", extra.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  draw(last_done_, "");
  std::fputc('\n', stderr);
}

}  // namespace traincache
