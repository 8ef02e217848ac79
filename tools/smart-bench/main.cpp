// smart-bench: measure what each caching strategy buys on a workload, and gate CI on it.
// See docs/smart-bench.md.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "traincache/base/cpu_contention.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/sha256.h"
#include "traincache/base/version.h"
#include "traincache/bench/bench_gate.h"
#include "traincache/bench/smart_bench.h"
#include "traincache/cli/cli.h"
#include "traincache/model/runtime.h"

using namespace traincache;
using json = report::Json;

namespace {

constexpr const char* kTool = "smart-bench";

// The result fields, declared once: JSON key, table header and width, and the value. Every printer
// (table, JSON, JSON Lines, CSV) walks this list through one record per epoch.
struct Field {
  report::Column column;
  report::Json (*get)(const bench::EpochRecord&);
};
const std::vector<Field>& fields() {
  using R = bench::EpochRecord;
  static const std::vector<Field> f = {
      {{"strategy", "strategy", 13}, [](const R& r) { return report::Json(r.strategy); }},
      {{"epoch", "epoch", 5}, [](const R& r) { return report::Json(r.epoch); }},
      {{"samples", "samples", 8}, [](const R& r) { return report::Json(r.samples); }},
      {{"wall_seconds", "wall s", 8}, [](const R& r) { return report::Json(r.wall_seconds); }},
      {{"samples_per_second", "samples/s", 10}, [](const R& r) { return report::Json(r.samples_per_second); }},
      {{"step_ms_mean", "step ms", 8}, [](const R& r) { return report::Json(r.step_ms_mean); }},
      {{"step_ms_p50", "p50 ms", 8}, [](const R& r) { return report::Json(r.step_ms_p50); }},
      {{"step_ms_p95", "p95 ms", 8}, [](const R& r) { return report::Json(r.step_ms_p95); }},
      {{"data_wait_seconds", "wait s", 8}, [](const R& r) { return report::Json(r.data_wait_seconds); }},
      {{"model_idle_fraction", "idle", 6}, [](const R& r) { return report::Json(r.model_idle_fraction); }},
      {{"hit_rate", "hits", 6}, [](const R& r) { return report::Json(r.hit_rate); }},
      {{"bytes_cached", "cached MiB", 10}, [](const R& r) { return report::Json(r.bytes_cached); }},
      {{"peak_rss_bytes", "RSS MiB", 8}, [](const R& r) { return report::Json(r.peak_rss_bytes); }},
      {{"boundary_blocked_seconds", "blocked s", 9},
       [](const R& r) { return report::Json(r.boundary_blocked_seconds); }},
      {{"cpu_seconds", "cpu s", 8}, [](const R& r) { return report::Json(r.cpu_seconds); }},
      {{"samples_per_cpu_second", "per cpu s", 10}, [](const R& r) { return report::Json(r.samples_per_cpu_second); }},
  };
  return f;
}

const std::vector<report::Column>& columns() {
  static const std::vector<report::Column> c = [] {
    std::vector<report::Column> out;
    for (const auto& f : fields()) out.push_back(f.column);
    return out;
  }();
  return c;
}

// The table's text of a value: byte counts in MiB, small numbers with three decimals.
std::string cell(const std::string& key, const report::Json& v) {
  char buf[64];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (key.find("bytes") == std::string::npos) return std::to_string(v.get<int64_t>());
    std::snprintf(buf, sizeof buf, "%.1f", v.get<double>() / (1 << 20));
    return buf;
  }
  std::snprintf(buf, sizeof buf, v.get<double>() < 10 ? "%.3f" : "%.1f", v.get<double>());
  return buf;
}

report::Record epoch_record(const bench::EpochRecord& r) {
  report::Record rec;
  for (const auto& f : fields()) {
    auto v = f.get(r);
    rec.add(f.column.key, v, cell(f.column.key, v));
  }
  return rec;
}

struct Options {
  cli::CommonOptions common;
  bench::BenchOptions b;
  std::string strategies = "none,full,stochastic,smart";
  std::vector<std::string> baselines;
  bool jsonl = false, csv = false, compare_anyway = false;
  double max_regression = 0.10;
};

// What the run measures with, as --json's "config" records it and --baseline compares it: the
// source, the loop, the step (the model file by its SHA-256) and the images' preprocessing.
json bench_config(const Options& o) {
  const auto& b = o.b;
  auto sha = [](const std::string& path) { return path.empty() ? json(nullptr) : json(sha256_file(path)); };
  json preprocess = json::object();
  for (const auto& [k, v] : b.images.preprocess.describe()) preprocess[k] = v;
  return {{"source", !b.data.empty()    ? b.data
                     : !b.files.empty() ? b.files
                                        : "shm:" + b.shm},
          {"items", b.items},
          {"batch_size", b.batch_size},
          {"epochs", b.epochs},
          {"workers", b.workers},
          {"threads", b.threads},
          {"read_latency_us", b.read_latency_us},
          {"deterministic_cost_us", b.deterministic_cost_us},
          {"preprocess", preprocess},
          {"model", b.model.empty() ? json(nullptr) : json(b.model)},
          {"model_sha256", sha(b.model)},
          {"frozen_encoder_sha256", sha(b.frozen_encoder)},
          {"model_ms", b.model_ms},
          {"cache_fraction", b.cache_fraction},
          {"cache_num", b.cache_num},
          {"replace_rate", b.replace_rate},
          {"seed", b.seed}};
}

// Error(data) naming what differs when baseline `path` was made with other settings (unless
// --compare-anyway): its throughput says nothing about this run's.
void refuse_other_baseline(const Options& o, const std::string& path, const json& config) {
  const auto diffs = bench::config_differences(bench::read_baseline_config(path), config);
  if (diffs.empty() || o.compare_anyway) return;
  std::string list;
  for (const auto& d : diffs) list += (list.empty() ? "" : ", ") + d;
  throw Error(Exit::data, path,
              "made with other settings (" + list +
                  "); make a new baseline with these, or compare anyway with --compare-anyway");
}

// The records of every --baseline file, pooled (null without one): each strategy's median is then
// taken over all their epochs, so that one run that came out fast or slow moves it less.
json read_baselines(const Options& o, const json& config) {
  json pooled;
  for (const auto& path : o.baselines) {
    const json records = bench::read_baseline(path);
    refuse_other_baseline(o, path, config);
    if (pooled.is_null()) pooled = json::array();
    for (const auto& r : records) pooled.push_back(r);
  }
  return pooled;
}

// What the gate compares: samples/s, or samples per CPU-second where other processes held the
// cores during this run (they slow the wall clock, not the work a sample costs) and the baseline
// recorded it.
std::string gate_measure(const CpuContention& c, const json& baseline) {
  const bool cpu_known = baseline.is_array() && !baseline.empty() && baseline[0].contains("samples_per_cpu_second");
  return c.measured && c.competed() && cpu_known ? "samples_per_cpu_second" : "samples_per_second";
}

json contention_json(const CpuContention& c) {
  if (!c.measured) return nullptr;
  return {{"cores", c.cores},
          {"seconds", c.seconds},
          {"running_seconds", c.running_seconds},
          {"waiting_seconds", c.waiting_seconds},
          {"others_cores", c.others_cores},
          {"competed", c.competed()}};
}

// Per measure (samples/s, samples per CPU-second) and strategy: the median over the epochs after the
// first, the epochs' noise and how many they were.
json throughput_json(const json& records) {
  json out = json::object();
  for (const char* measure : {"samples_per_second", "samples_per_cpu_second"})
    for (const auto& [s, t] : bench::throughput_of(records, measure))
      out[measure][s] = {{"median", t.median}, {"noise", t.noise}, {"epochs", t.epochs}};
  return out;
}

json gate_json(const std::vector<bench::Comparison>& comparisons, double max_regression) {
  json out = json::array();
  for (const auto& c : comparisons)
    out.push_back({{"strategy", c.strategy},
                   {"before", c.before},
                   {"after", c.after},
                   {"change", c.change},
                   {"noise_before", c.noise_before},
                   {"noise_after", c.noise_after},
                   {"max_regression", max_regression},
                   {"regressed", c.regressed}});
  return out;
}

// The gate's lines on stderr (a regression always, the rest unless -q); 1 when a strategy regressed.
// Epochs that vary by more than the limit are said: one run cannot tell such a regression from noise.
int report_gate(const std::vector<bench::Comparison>& comparisons, const Options& o, const std::string& measure) {
  const char* unit = measure == "samples_per_second" ? "samples/s" : "samples per CPU-second";
  int status = 0;
  for (const auto& c : comparisons) {
    const double noise = std::max(c.noise_before, c.noise_after);
    char spread[96];
    std::snprintf(spread, sizeof spread, "; epochs vary by %.1f%% now, %.1f%% in the baseline", 100 * c.noise_after,
                  100 * c.noise_before);
    if (c.regressed) {
      std::fprintf(stderr, "%s: regression: %s: %.1f -> %.1f %s (%+.1f%%, limit -%.1f%%%s)\n", kTool,
                   c.strategy.c_str(), c.before, c.after, unit, 100 * c.change, 100 * o.max_regression, spread);
      status = 1;
    } else if (!o.common.quiet) {
      std::fprintf(stderr, "%s: %s: %.1f -> %.1f %s (%+.1f%%%s)\n", kTool, c.strategy.c_str(), c.before, c.after, unit,
                   100 * c.change, spread);
    }
    if (noise > o.max_regression / 2 && !o.common.quiet)
      std::fprintf(stderr,
                   "%s: warning: %s: its epochs vary by %.1f%%, over half the limit of %.1f%%: a change of that size "
                   "cannot be told from noise (more --epochs, or a quieter machine)\n",
                   kTool, c.strategy.c_str(), 100 * noise, 100 * o.max_regression);
  }
  return status;
}

int run(Options& o) {
  o.b.strategies.clear();
  for (const auto& name : cli::split(o.strategies, ',')) {
    auto c = bench::caching_choices().find(name);
    if (!c)
      throw Error(Exit::usage, "--strategy",
                  "unknown strategy '" + name + "' (known: " + bench::caching_choices().list(", ") + ")");
    o.b.strategies.push_back(*c);
  }
  o.b.threads = o.common.threads;
  // The model files' digests only where the config is used: --json, or a baseline to compare.
  const json config = o.common.json || !o.baselines.empty() ? bench_config(o) : json();
  const json baseline = read_baselines(o, config);

  json records = json::array();
  bool header_done = false;
  auto on_record = [&](const bench::EpochRecord& r) {
    auto rec = epoch_record(r);
    records.push_back(rec.json());
    if (o.jsonl) {
      report::print_json(rec.json());
    } else if (o.csv) {
      if (!header_done) std::printf("%s\n", report::csv_header(columns()).c_str());
      std::printf("%s\n", report::csv_row(columns(), rec).c_str());
    } else if (!o.common.json) {
      if (!header_done) std::printf("%s\n", report::table_header(columns()).c_str());
      std::printf("%s\n", report::table_row(columns(), rec).c_str());
    }
    header_done = true;
    std::fflush(stdout);  // records as they finish
  };
  auto info = [&](const std::string& m) {
    if (o.common.verbose) std::fprintf(stderr, "%s: %s\n", kTool, m.c_str());
  };
  CpuContentionWatch watch;
  bench::run_in_module(o.b, on_record, info);
  const CpuContention contention = watch.stop();
  const std::string measure = gate_measure(contention, baseline);

  const auto comparisons = baseline.is_null() ? std::vector<bench::Comparison>{}
                                              : bench::compare(baseline, records, o.max_regression, measure);
  if (o.common.json) {
    json doc{{"schema", "smart-bench/1"},
             {"version", version_banner(kTool)},
             {"blas", active_blas()},
             {"config", config},
             {"contention", contention_json(contention)},
             {"gate_measure", measure},
             {"records", records},
             {"samples_per_second", bench::throughput(records)},
             {"throughput", throughput_json(records)}};
    if (!baseline.is_null()) {
      doc["baselines"] = o.baselines;
      doc["gate"] = gate_json(comparisons, o.max_regression);
    }
    report::print_json(doc);
  }
  if (baseline.is_null()) return 0;
  if (measure != "samples_per_second" && !o.common.quiet)
    std::fprintf(stderr,
                 "%s: other processes held %.1f of the %u cores on average: compared samples per CPU-second, "
                 "which they change little, not samples/s\n",
                 kTool, contention.others_cores, contention.cores);
  return report_gate(comparisons, o, measure);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark caching strategies on a data pipeline; gate CI on throughput.", kTool};
  Options o;
  auto& b = o.b;
  cli::add_common_options(app, o.common, cli::Compute::threads_only, model::runtime_info_in_module);
  app.add_option(
         "--data", b.data,
         "uint8 items: HDF5 file, .npy, .npz; or images: an image folder, a .csv/.tsv/.jsonl manifest or tar shards")
      ->group("Source");
  app.add_option("--dataset", b.dataset,
                 "Item dataset, .npz member or manifest path field (default: images; a folder's image)")
      ->group("Source");
  app.add_option("--labels", b.labels, "Label dataset or manifest field (default: a folder's label)")->group("Source");
  app.add_option("--files", b.files, "Directory of per-sample files (meta.json + <i>.bin)")->group("Source");
  app.add_option("--shm", b.shm, "Fixed-layout uint8 shared-memory slab")->group("Source");
  app.add_flag("--trust-slab-owner", b.images.trust_slab_owner,
               "Read a --shm slab (or shm:NAME source) of another user")
      ->group("Source");
  app.add_option("--items", b.items, "Use the first N items (0: all)")->capture_default_str()->group("Source");
  app.add_flag("--page-cache", b.page_cache, "Let file reads hit the page cache (default: drop pages)")
      ->group("Source");
  app.add_option("--read-latency-us", b.read_latency_us, "Emulated storage latency per read")
      ->capture_default_str()
      ->group("Cost");
  app.add_option("--deterministic-cost-us", b.deterministic_cost_us, "Emulated CPU cost per deterministic transform")
      ->capture_default_str()
      ->group("Cost");
  cli::add_file_options(app, b.images, "Images (cache-fill's preprocessing; arrays: --resize H,W only)", true);
  app.add_option("--model", b.model, "TorchScript model trained with SGD each step")->group("Cost");
  app.add_option("--model-ms", b.model_ms, "Synthetic compute per batch when there is no --model")
      ->check(cli::positive_number(true))
      ->capture_default_str()
      ->group("Cost");
  app.add_option("--strategy", o.strategies, "Comma-separated: " + bench::caching_choices().list(", "))
      ->capture_default_str();
  app.add_option("--frozen-encoder", b.frozen_encoder, "embed: frozen TorchScript encoder run every step")
      ->group("embed");
  app.add_option("--cache", b.cache, "embed: cache-fill cache of the same items")->group("embed");
  app.add_option("--embeddings", b.embeddings, "embed: encoder name in the cache (default: the only one)")
      ->group("embed");
  app.add_option("--cache-fraction", b.cache_fraction, "stochastic: share of items cached")->capture_default_str();
  app.add_option("--cache-num", b.cache_num, "smart: window size N (0: half the items)")->capture_default_str();
  app.add_option("--replace-rate", b.replace_rate, "smart: replace rate r (R = ceil(N r) per epoch)")
      ->capture_default_str();
  app.add_option("--replace-workers", b.replace_workers, "smart: replacer threads")
      ->check(cli::integer_range(1, 64))
      ->capture_default_str();
  app.add_option("-b,--batch-size", b.batch_size, "Samples per step")
      ->check(cli::positive_integer())
      ->capture_default_str();
  app.add_option("--epochs", b.epochs, "Epochs per strategy")->check(cli::positive_integer())->capture_default_str();
  app.add_option("--workers", b.workers, "Loader threads")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--seed", b.seed, "Seed of shuffling and random transforms")->capture_default_str();
  app.add_flag("--jsonl", o.jsonl, "One JSON record per line, as each epoch finishes");
  app.add_flag("--csv", o.csv, "CSV with a header line");
  app.add_option("--baseline", o.baselines,
                 "Previous --json results (one or more, pooled): exit 1 on a throughput regression");
  app.add_flag("--compare-anyway", o.compare_anyway,
               "Compare with a --baseline made with other settings (refused otherwise, naming them)");
  app.add_option("--max-regression", o.max_regression, "Allowed relative drop of samples/s per strategy")
      ->check(cli::positive_number(true))
      ->capture_default_str();
  app.footer(
      "EXAMPLES\n"
      "  smart-bench --data data.h5 --dataset images --strategy none,full,stochastic:0.5,smart:0.2,0.1\n"
      "  smart-bench --data photos/ --resize 64 --center-crop 64 --strategy none,full --json\n"
      "  smart-bench --data data.h5 --dataset images --strategy full --epochs 9 \\\n"
      "              --baseline main-1.json main-2.json main-3.json --max-regression 0.10\n\n"
      "EXIT STATUS\n  0 done (no regression); 1 a strategy regressed beyond --max-regression; 64 usage;\n"
      "  65 bad data; 66 input missing; 69 slab or LibTorch's module (libtraincache_engines.so)\n"
      "  missing; 70 internal; 73 cannot create the stochastic slab;\n"
      "  130 interrupted (SIGINT/SIGTERM; the temporary slab is removed).\n"
      "See docs/smart-bench.md.");
  return cli::end_process(cli::run_tool(kTool, app, argc, argv, [&] {
    if (o.common.json + o.jsonl + o.csv > 1) throw Error(Exit::usage, "--json", "choose one of --json, --jsonl, --csv");
    // The loop stops at the next batch; the stochastic slab is removed.
    install_interrupt_handlers(std::string(kTool) +
                               ": interrupted: stopping after this batch; interrupt again to stop at once");
    return run(o);
  }));
}
