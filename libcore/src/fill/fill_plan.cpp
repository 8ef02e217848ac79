#include "traincache/fill/fill_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "traincache/base/error.h"
#include "traincache/model/precision.h"
#include "traincache/text/tokenizer.h"

using nlohmann::json;

namespace traincache::fill {

const Choices<Convert>& convert_choices() {
  static const Choices<Convert> c{{Convert::auto_, "auto"}, {Convert::host, "host"}, {Convert::device, "device"}};
  return c;
}

const Choices<Decode>& decode_choices() {
  static const Choices<Decode> c{{Decode::auto_, "auto"}, {Decode::host, "host"}, {Decode::device, "device"}};
  return c;
}

const Choices<OnError>& on_error_choices() {
  static const Choices<OnError> c{{OnError::fail, "fail"}, {OnError::skip, "skip"}};
  return c;
}

const Choices<DType>& storage_dtype_choices() {
  static const Choices<DType> c{{DType::f32, "float32"}, {DType::f16, "float16"}};
  return c;
}

double precision_tolerance_for(const FillOptions& opts) {
  if (opts.precision_tolerance) return *opts.precision_tolerance;
  return opts.precision == Precision::int8 ? 0.25 : 0.02;
}

void validate_options(const FillOptions& opts) {
  if (opts.encoders.empty()) throw Error(Exit::usage, "--encoder", "at least one encoder is required");
  if (opts.out.empty()) throw Error(Exit::usage, "--out", "an output file is required");
  if (opts.batch_size <= 0) throw Error(Exit::usage, "--batch-size", "must be positive");
  if (opts.dtype != DType::f32 && opts.dtype != DType::f16)
    throw Error(Exit::usage, "--dtype", "must be float32 or float16");
  std::set<std::string> names;
  for (const auto& e : opts.encoders) {
    if (e.name.empty() || e.name.find_first_of("/.") != std::string::npos)
      throw Error(Exit::usage, "--encoder", "invalid encoder name '" + e.name + "'");
    if (text::first_invalid_utf8(e.name) != std::string::npos) {  // its journal entry would not read back
      std::string shown = e.name;
      text::repair_utf8(shown);
      throw Error(Exit::usage, "--encoder",
                  "encoder name '" + shown + "' is not UTF-8 (it names a dataset of the cache)");
    }
    if (!names.insert(e.name).second)
      throw Error(Exit::usage, "--encoder", "encoder name '" + e.name + "' given twice");
    const bool has_text = !(e.text.empty() ? opts.text : e.text).empty();
    if (has_text && (e.tokenizer.empty() ? opts.tokenizer : e.tokenizer).empty())
      throw Error(Exit::usage, "--tokenizer", "encoder '" + e.name + "' reads text: give its tokenizer.json or .model");
  }
  if (opts.tokenize.max_length < 0) throw Error(Exit::usage, "--max-length", "must be positive");
  // Before the device is asked for: a precision the device kind cannot run is a usage error (64),
  // whether or not this machine has that device.
  model::check_precision(opts.precision, model::parse_device_spec(opts.device).cuda, "--precision");
  if (opts.precision_tolerance && !(*opts.precision_tolerance > 0 && *opts.precision_tolerance < 1))
    throw Error(Exit::usage, "--precision-tolerance", "must be a fraction above 0 and below 1");
  if (opts.update && opts.shard_count > 0)
    throw Error(Exit::usage, "--update",
                "cannot be combined with --shard: update the input's cache in one process (its new and changed "
                "rows are what it encodes)");
}

RowPlan plan_rows(const FillOptions& opts, int64_t input_rows, const std::vector<int64_t>& groups) {
  RowPlan p;
  int64_t a = opts.row_begin, b = opts.row_end < 0 ? input_rows : opts.row_end;
  if (a >= input_rows || b > input_rows || a >= b)
    throw Error(Exit::usage, "--rows",
                std::to_string(a) + ":" + std::to_string(b) + " is outside the input's " + std::to_string(input_rows) +
                    " rows");
  p.job_begin = p.begin = a;
  p.job_end = p.end = b;
  p.sharded = opts.shard_count > 0;
  if (!p.sharded) return p;
  if (opts.shard_index < 0 || opts.shard_index >= opts.shard_count)
    throw Error(Exit::usage, "--shard", "expected I/N with 0 <= I < N");
  if (!groups.empty()) {  // whole files: the first row of each inside [a, b)
    std::vector<int64_t> starts{a};
    for (int64_t g : groups)
      if (g > a && g < b) starts.push_back(g);
    const auto n = static_cast<int64_t>(starts.size());
    // Every shard refuses alike, before encoding: a run some of whose shards are empty can never merge.
    const int64_t lo = n * opts.shard_index / opts.shard_count, hi = n * (opts.shard_index + 1) / opts.shard_count;
    if (opts.shard_count > n)
      throw Error(Exit::usage, "--shard",
                  std::to_string(opts.shard_count) + " shards for only " + std::to_string(n) +
                      " input files (each shard takes whole files)");
    p.begin = starts[static_cast<std::size_t>(lo)];
    p.end = hi < n ? starts[static_cast<std::size_t>(hi)] : b;
    return p;
  }
  const int64_t nb = (b - a + opts.batch_size - 1) / opts.batch_size;
  const int64_t lo = nb * opts.shard_index / opts.shard_count;
  const int64_t hi = nb * (opts.shard_index + 1) / opts.shard_count;
  if (opts.shard_count > nb)
    throw Error(Exit::usage, "--shard",
                std::to_string(opts.shard_count) + " shards for only " + std::to_string(nb) + " batches");
  p.begin = a + lo * opts.batch_size;
  p.end = std::min(b, a + hi * opts.batch_size);
  return p;
}

std::vector<std::pair<int64_t, int64_t>> unit_ranges(int64_t begin, int64_t end, int64_t unit,
                                                     const std::vector<int64_t>& groups) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto next_group = std::upper_bound(groups.begin(), groups.end(), begin);
  for (int64_t s = begin; s < end;) {
    while (next_group != groups.end() && *next_group <= s) ++next_group;
    int64_t e = std::min(s + unit, end);
    if (next_group != groups.end()) e = std::min(e, *next_group);
    out.emplace_back(s, e - s);
    s = e;
  }
  return out;
}

std::string fingerprint_diff(const std::string& old_json, const std::string& now_json) {
  json old = json::parse(old_json, nullptr, false), now = json::parse(now_json, nullptr, false);
  if (old.is_discarded()) return "unreadable stored fingerprint";
  std::set<std::string> paths;
  for (const auto& op : json::diff(old, now)) {
    std::string p = op.value("path", "");
    // Report one setting, not an element of an array setting ("/input/rows/1" -> "input/rows").
    auto slash = p.rfind('/');
    if (slash != std::string::npos && slash + 1 < p.size() &&
        p.find_first_not_of("0123456789", slash + 1) == std::string::npos)
      p.resize(slash);
    paths.insert(p.size() > 1 ? p.substr(1) : "everything");
  }
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s.empty() ? "unknown" : s;
}

std::string shard_path(const std::string& out, int index, int count) {
  return out + ".shard-" + std::to_string(index) + "-of-" + std::to_string(count);
}

}  // namespace traincache::fill
