// cache-fill: run frozen TorchScript encoders once over an HDF5 dataset and store the embeddings,
// labels and keys in a fingerprinted, resumable cache file. See docs/cache-fill.md.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "traincache/cli.h"
#include "traincache/fill.h"
#include "traincache/interrupt.h"
#include "traincache/launch.h"
#include "traincache/merge.h"
#include "traincache/text.h"

#include <chrono>
#include <cstdlib>
#include <sys/stat.h>
#include <thread>

using namespace traincache;

namespace {

constexpr const char* kTool = "cache-fill";

struct Options {
  cli::CommonOptions common;
  fill::FillOptions fill;
  std::vector<std::string> encoders, features, outputs;
  std::string dtype = "float32", rows, input_scale = "1/255", shard;
  bool no_optimize = false, merge_after = false;
  double merge_timeout = 3600;
  cache::MergeOptions merge;
};

// "I/N", or RANK and WORLD_SIZE from the environment (torchrun and other launchers set them).
void resolve_shard(Options& o) {
  std::string spec = o.shard;
  if (spec.empty()) {
    auto launch = dist::read_launch();
    if (!launch.distributed()) return;
    spec = std::to_string(launch.rank) + "/" + std::to_string(launch.world_size);
  }
  auto slash = spec.find('/');
  auto i = slash == std::string::npos ? std::nullopt : cli::parse_int(spec.substr(0, slash));
  auto n = slash == std::string::npos ? std::nullopt : cli::parse_int(spec.substr(slash + 1));
  if (!i || !n || *n <= 0 || *i < 0 || *i >= *n)
    throw Error(Exit::usage, "--shard", "expected I/N with 0 <= I < N, got '" + spec + "'");
  o.fill.shard_index = static_cast<int>(*i);
  o.fill.shard_count = static_cast<int>(*n);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Rank 0 with --merge: wait (at most --merge-timeout seconds; 0 = no limit) until every shard
// file is a complete cache, then merge them.
void merge_when_complete(Options& o) {
  std::vector<std::string> paths;
  for (int i = 0; i < o.fill.shard_count; ++i) paths.push_back(fill::shard_path(o.fill.out, i, o.fill.shard_count));
  const auto t0 = std::chrono::steady_clock::now();
  for (std::vector<std::string> missing = paths; !missing.empty();) {
    std::vector<std::string> still;
    for (const auto& p : missing) {
      struct stat st;
      if (stat(p.c_str(), &st) != 0) still.push_back(p);
    }
    missing = still;
    if (missing.empty()) break;
    if (interrupt_requested()) throw Error(Exit::interrupted, "--merge", "interrupted while waiting for the other shards");
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.merge_timeout > 0 && waited >= o.merge_timeout) {
      std::string list;
      for (const auto& p : missing) list += (list.empty() ? "" : ", ") + p;
      throw Error(Exit::temp_failure, "--merge",
                  "gave up after " + seconds_text(o.merge_timeout) + " s waiting for " + list +
                      " (run their shards, then cache-fill merge)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  cache::merge_shards({o.fill.out, paths, false});
  if (!o.common.quiet)
    std::fprintf(stderr, "%s: %s: merged %d shards\n", kTool, o.fill.out.c_str(), o.fill.shard_count);
}

std::string stem(const std::string& path) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Turns the repeatable NAME=VALUE options into per-encoder settings.
void resolve_encoders(Options& o) {
  for (const auto& spec : o.encoders) {
    auto [name, path] = cli::split_assignment(spec);
    o.fill.encoders.push_back({name ? *name : stem(path), path, {}, ""});
  }
  auto find = [&](const std::string& name, const char* opt) -> fill::EncoderSpec& {
    for (auto& e : o.fill.encoders)
      if (e.name == name) return e;
    std::vector<std::string> have;
    for (const auto& e : o.fill.encoders) have.push_back(e.name);
    throw Error(Exit::usage, opt, "no encoder named '" + name + "' (have: " + name_list(have) + ")");
  };
  for (const auto& spec : o.features) {
    auto [name, list] = cli::split_assignment(spec);
    auto datasets = cli::split(list, ',');
    if (datasets.empty()) throw Error(Exit::usage, "--features", "empty dataset list");
    if (name) find(*name, "--features").features = datasets;
    else o.fill.features = datasets;
  }
  for (const auto& spec : o.outputs) {
    auto [name, sel] = cli::split_assignment(spec);
    if (name) find(*name, "--output").output = sel;
    else
      for (auto& e : o.fill.encoders)
        if (e.output.empty()) e.output = sel;
  }
}

nlohmann::ordered_json summary_json(const fill::FillResult& r, const std::string& out) {
  static const char* status[] = {"done", "up_to_date", "interrupted"};
  nlohmann::ordered_json j{{"schema", "cache-fill/1"},
                   {"status", status[static_cast<int>(r.status)]},
                   {"out", out},
                   {"rows", r.rows},
                   {"rows_encoded", r.rows_encoded},
                   {"resumed_from", r.resumed_from},
                   {"seconds", r.seconds},
                   {"encode_seconds", r.encode_seconds},
                   {"model_setup_seconds", r.model_setup_seconds},
                   {"digest_seconds", r.digest_seconds},
                   {"publish_seconds", r.publish_seconds},
                   {"rows_per_second", r.seconds > 0 ? r.rows_encoded / r.seconds : 0.0},
                   {"bytes_written", r.bytes_written},
                   {"fingerprint", r.fingerprint}};
  j["encoders"] = nlohmann::ordered_json::array();
  for (const auto& e : r.encoders)
    j["encoders"].push_back({{"name", e.name}, {"shape", e.shape}, {"inference", e.inference},
                             {"optimize_max_abs_diff", e.optimize_max_abs_diff}});
  if (!r.partial_path.empty()) j["partial"] = r.partial_path;
  return j;
}


int run(Options& o) {
  for (auto [given, flag] : {std::pair{!o.fill.input.empty(), "--input"}, std::pair{!o.encoders.empty(), "--encoder"},
                             std::pair{!o.fill.out.empty(), "--out"}})
    if (!given) throw Error(Exit::usage, "", std::string(flag) + " is required (see --help)");
  resolve_shard(o);
  if (o.merge_after && o.fill.shard_count <= 0) throw Error(Exit::usage, "--merge", "needs --shard I/N (or RANK/WORLD_SIZE)");
  resolve_encoders(o);
  o.fill.dtype = parse_dtype(o.dtype);
  o.fill.optimize = !o.no_optimize;
  o.fill.threads = o.common.threads;
  o.fill.device = o.common.device;
  o.fill.input_scale = cli::parse_fraction(o.input_scale, "--input-scale");
  if (!o.rows.empty()) std::tie(o.fill.row_begin, o.fill.row_end) = cli::parse_row_range(o.rows);
  install_interrupt_handlers();

  fill::FillCallbacks cb;
  std::unique_ptr<Progress> progress;
  cb.progress = [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<Progress>("encoding", total, o.common.progress_mode());
    progress->update(done);
  };
  cb.warn = [&](const std::string& m) {
    if (!o.common.quiet) cli::print_warning(kTool, m);
  };
  fill::FillResult r = fill::run_fill(o.fill, cb);
  if (progress) progress->finish();

  if (o.common.json) std::printf("%s\n", summary_json(r, r.out).dump().c_str());
  if (r.status == fill::FillStatus::interrupted) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: interrupted after %lld rows; progress kept in %s (run the same command "
                 "again to resume)\n", kTool, static_cast<long long>(r.rows), r.partial_path.c_str());
    return cli::code(Exit::interrupted);
  }
  if (!o.common.quiet && !o.common.json) {
    if (r.status == fill::FillStatus::up_to_date) {
      std::fprintf(stderr, "%s: %s: up to date (%lld rows, fingerprint %.12s)\n", kTool,
                   r.out.c_str(), static_cast<long long>(r.rows), r.fingerprint.c_str());
    } else {
      std::string encs;
      for (const auto& e : r.encoders)
        encs += (encs.empty() ? "" : ", ") + e.name + " " + shape_text(e.shape) + " " + e.inference;
      std::fprintf(stderr, "%s: %s: %lld rows (%lld encoded%s) in %.2f s, %.0f rows/s; %s\n", kTool,
                   r.out.c_str(), static_cast<long long>(r.rows),
                   static_cast<long long>(r.rows_encoded),
                   r.resumed_from ? (", resumed at " + std::to_string(r.resumed_from)).c_str() : "",
                   r.seconds, r.seconds > 0 ? r.rows_encoded / r.seconds : 0.0, encs.c_str());
    }
  }
  if (o.merge_after && o.fill.shard_index == 0) merge_when_complete(o);
  return 0;
}

int run_merge(Options& o) {
  cache::merge_shards(o.merge);
  if (o.common.json)
    std::printf("%s\n", nlohmann::ordered_json{{"schema", "cache-fill/1"}, {"status", "merged"}, {"out", o.merge.out},
                                               {"shards", o.merge.shards.size()}, {"copy", o.merge.copy}}
                            .dump()
                            .c_str());
  else if (!o.common.quiet)
    std::fprintf(stderr, "%s: %s: merged %zu shards (%s)\n", kTool, o.merge.out.c_str(), o.merge.shards.size(),
                 o.merge.copy ? "copied" : "virtual datasets");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encode an HDF5 dataset once with frozen TorchScript encoders into a cache file.",
               kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::full, fill::runtime_info);
  app.add_option("-i,--input", o.fill.input, "Input HDF5 file or shm:NAME (required)");
  app.add_option("-e,--encoder", o.encoders, "[NAME=]model.pt (repeatable; NAME defaults to the file stem; required)");
  app.add_option("-f,--features", o.features,
                 "[NAME=]DATASET[,DATASET...]: input datasets fed to the encoders (NAME= for one encoder)");
  app.add_option("--labels", o.fill.labels, "Label dataset copied into the cache");
  app.add_option("--key", o.fill.keys, "Per-row key dataset (integers or strings)");
  app.add_option("-o,--out", o.fill.out, "Output cache file (required)");
  app.add_option("--shard", o.shard, "Encode shard I/N into OUT.shard-I-of-N (default: RANK/WORLD_SIZE if set)");
  app.add_flag("--merge", o.merge_after, "With --shard: shard 0 waits for all shards, then merges them into OUT");
  app.add_option("--merge-timeout", o.merge_timeout, "Seconds shard 0 waits for the others with --merge (0: no limit)")
      ->check(cli::positive_number(true))->capture_default_str();
  auto* merge = app.add_subcommand("merge", "Merge the shard files of one job into one cache");
  merge->add_option("-o,--out", o.merge.out, "Merged cache file")->required();
  merge->add_option("shards", o.merge.shards, "Shard files")->required();
  merge->add_flag("--copy", o.merge.copy, "Copy the data (default: HDF5 virtual datasets over the shard files)");
  merge->fallthrough();
  app.add_option("--output", o.outputs, "[NAME=]KEY|INDEX: the tensor to keep from a tuple/dict output");
  app.add_option("-b,--batch-size", o.fill.batch_size, "Rows per encoder call")
      ->check(cli::positive_integer())->capture_default_str();
  app.add_option("--workers", o.fill.workers, "Reader/converter threads prefetching batches")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--dtype", o.dtype, "Storage dtype")->check(CLI::IsMember({"float32", "float16"}))
      ->capture_default_str();
  app.add_option("--rows", o.rows, "Encode only input rows A:B (half-open)");
  app.add_option("--input-scale", o.input_scale, "Scale applied to uint8 inputs (number or A/B)")
      ->capture_default_str();
  app.add_option("--commit-rows", o.fill.commit_rows, "Rows between durable progress commits")
      ->check(cli::positive_integer())->capture_default_str();
  app.add_flag("--force", o.fill.force, "Overwrite a cache or partial progress with another fingerprint");
  app.add_flag("--check-determinism", o.fill.check_determinism,
               "Encode the first batch twice and fail (65) if the outputs differ");
  app.add_flag("--no-optimize", o.no_optimize, "Run the plain module (no freeze/optimize_for_inference)");
  app.footer(
      "EXIT STATUS\n  0 done or up to date; 64 usage; 65 bad data (corrupt input, shape/dtype, NaN, "
      "non-deterministic encoder);\n  66 input or encoder missing; 69 CUDA unavailable; 70 internal; "
      "73 output in the way or not creatable;\n  74 I/O error; 75 --merge gave up waiting for shards; 130 interrupted (progress kept, run again "
      "to resume).\nSee docs/cache-fill.md.");
  return cli::run_tool(kTool, app, argc, argv, [&] { return merge->parsed() ? run_merge(o) : run(o); });
}
