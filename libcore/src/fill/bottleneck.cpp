#include "traincache/fill/bottleneck.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "traincache/base/format.h"

namespace traincache::fill {

namespace {

// Rows per second of a stage with `threads` threads that were busy `busy` seconds in all.
double rate(int64_t rows, int threads, double busy) {
  return busy > 0 ? static_cast<double>(rows) * threads / busy : 0.0;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// The threads of a fill that work one after another on each unit: the reader threads (stages 0-3),
// the encode thread (4-6, or 5-6 beside a convert thread's 4) and the store thread (7). The slowest
// of them bounds the loop.
struct Group {
  const char* name;
  int threads;
  double busy;
  std::size_t first, last;
};

std::string group_head(const Bottleneck& r) {
  std::string head = "bound by " + r.bound + ": ";
  if (r.group == "readers")
    head += std::to_string(r.group_threads) + (r.group_threads == 1 ? " reader " : " readers ");
  else
    head += "the " + r.group + " thread ";
  return head + format_count(r.group_rows_per_second) + " rows/s";
}

// "; padding 12% of the token slots" for text, with the remedy when the share is large.
std::string padding_text(const Bottleneck& r, const FillTimings& t) {
  if (r.padding_share < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "; padding %.0f%% of the token slots", 100 * r.padding_share);
  const bool large = r.padding_share > kLargePaddingShare && !t.padding_remedy.empty();
  return buf + (large ? ": " + t.padding_remedy : "");
}

std::string verdict(const Bottleneck& r, const FillTimings& t) {
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, "; forward alone %s rows/s; %.2f of the model's speed",
                format_count(r.forward_rows_per_second).c_str(), r.model_fraction);
  std::string tail = numbers + padding_text(r, t);
  if (!r.int8_instructions.empty()) tail += "; int8 on a CPU with " + r.int8_instructions;
  if (r.bound != "fixed costs") return group_head(r) + tail;
  char part[32];
  std::snprintf(part, sizeof part, "%.2f of ", r.fixed_seconds);
  return "bound by fixed costs: " + std::string(part) + seconds_text(t.seconds) + " (model setup " +
         seconds_text(t.model_setup_seconds) + ", input digests " + seconds_text(t.digest_seconds) + ", publish " +
         seconds_text(t.publish_seconds) + ")" + tail;
}

}  // namespace

std::optional<Bottleneck> find_bottleneck(const FillTimings& t) {
  const StageSeconds& b = t.busy;
  if (t.rows <= 0 || b.forward <= 0 || t.seconds <= 0) return std::nullopt;
  Bottleneck r;
  r.loop_seconds = t.loop_seconds;
  r.fixed_seconds = std::max(0.0, t.seconds - t.loop_seconds);
  const double loop = std::max(t.loop_seconds, 1e-9);
  const int readers = std::max(1, t.readers);
  auto add = [&](const char* name, int threads, double busy) {
    busy = std::max(0.0, busy);
    r.stages.push_back({name, threads, busy, busy / (threads * loop), rate(t.rows, threads, busy)});
  };
  add("read", readers, b.input - b.decode - b.resize - b.tokenize);
  add("decode", readers, b.decode);
  add("resize", readers, b.resize);
  add("tokenize", readers, b.tokenize);
  add("convert", 1, b.convert);
  add("forward", 1, b.forward);
  add("to_host", 1, b.to_host);
  add("store", 1, b.store);

  std::vector<Group> groups{{"readers", readers, b.input, 0, 3}};
  if (t.convert_thread)
    groups.insert(groups.end(), {{"convert", 1, b.convert, 4, 4}, {"encode", 1, b.forward + b.to_host, 5, 6}});
  else
    groups.push_back({"encode", 1, b.convert + b.forward + b.to_host, 4, 6});
  groups.push_back({"store", 1, b.store, 7, 7});
  const Group& g = *std::max_element(groups.begin(), groups.end(), [](const Group& x, const Group& y) {
    return x.busy / x.threads < y.busy / y.threads;
  });
  auto stage = std::max_element(r.stages.begin() + static_cast<std::ptrdiff_t>(g.first),
                                r.stages.begin() + static_cast<std::ptrdiff_t>(g.last) + 1,
                                [](const auto& x, const auto& y) { return x.busy_seconds < y.busy_seconds; });
  r.group = g.name;
  r.group_threads = g.threads;
  r.convert_thread = t.convert_thread;
  r.group_rows_per_second = rate(t.rows, g.threads, g.busy);
  r.bound = r.fixed_seconds > r.loop_seconds ? "fixed costs" : stage->name;
  r.rows_per_second = static_cast<double>(t.rows) / t.seconds;
  r.forward_rows_per_second = rate(t.rows, 1, b.forward);
  r.model_fraction = r.rows_per_second / r.forward_rows_per_second;
  r.int8_instructions = t.int8_instructions;
  if (t.token_slots > 0) r.padding_share = 1.0 - static_cast<double>(t.tokens) / static_cast<double>(t.token_slots);
  r.verdict = verdict(r, t);
  return r;
}

}  // namespace traincache::fill
