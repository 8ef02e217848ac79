#include "traincache/progress.h"

#include <unistd.h>

#include <cstdio>

#include "traincache/error.h"

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
      start_(std::chrono::steady_clock::now()),
      last_draw_() {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done, const std::string& extra) {
  last_done_ = done;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  draw(done, extra);
}

void Progress::draw(int64_t done, const std::string& extra) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = secs > 0 ? done / secs : 0;
  constexpr int kWidth = 30;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  char eta[32] = "";
  if (rate > 0 && total_ > done) std::snprintf(eta, sizeof eta, "  ETA %.0fs", (total_ - done) / rate);
  std::fprintf(stderr, "\r%s [%s] %lld/%lld  %.0f %s/s%s%s%s\x1b[K", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), rate, unit_.c_str(), eta,
               extra.empty() ? "" : "  ", extra.c_str());
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
