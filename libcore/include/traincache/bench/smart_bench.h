// smart-bench's engine: a data pipeline (read -> deterministic transform -> random transform ->
// batch -> model step) run under several caching strategies, measured per epoch. Torch-free
// interface; implemented in the torch part of libcore. See docs/smart-bench.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/io/source.h"

namespace traincache::bench {

/// The caching strategies (--strategy). embed runs as two records per epoch: "embed_encoder" (the
/// frozen encoder every step) and "embed_cache" (embeddings read from the cache).
enum class Caching { none, full, stochastic, smart, embed };

/// "none", "full", "stochastic", "smart", "embed": the one list of strategy names.
const Choices<Caching>& caching_choices();

/// The workload and the strategies to compare. Defaults match the command line's.
struct BenchOptions {
  // Where items come from (exactly one).
  std::string data, dataset, labels;  ///< a source (traincache/source.h): "" = images of HDF5, a folder's image
  std::string files;                  ///< a directory of per-sample files (see docs)
  std::string shm;                    ///< a fixed-layout shared-memory slab
  int64_t items = 0;                  ///< use the first N items (0 = all)
  bool page_cache = false;            ///< let file reads be served from the page cache
  int64_t read_latency_us = 0;        ///< added per read: emulates slow storage
  int64_t deterministic_cost_us = 0;  ///< added per deterministic transform: heavy preprocessing
  /// Images (a folder, a manifest's path field) are decoded and preprocessed as cache-fill does
  /// (images.preprocess, the same code path); uint8 arrays (datasets, files, slabs) take only a
  /// resize to H,W from it, as a bilinear resize of the deterministic stage.
  io::source::FileOptions images;
  // The step.
  std::string model;      ///< TorchScript model trained with SGD, or
  double model_ms = 1.0;  ///< synthetic compute per batch (when no model)
  double lr = 0.01;
  // The loop.
  int64_t batch_size = 64, epochs = 3;
  int workers = 2;  ///< loader threads
  uint64_t seed = 0;
  int threads = 0;
  // Strategies.
  std::vector<Caching> strategies{Caching::none, Caching::full, Caching::stochastic, Caching::smart};
  std::string frozen_encoder;   ///< embed: the frozen TorchScript encoder, and
  std::string cache;            ///< embed: its cache-fill cache of the same items
  std::string embeddings;       ///< embed: the encoder's name in the cache ("" = the only one)
  double cache_fraction = 0.5;  ///< stochastic: share of items in the slab
  int64_t cache_num = 0;        ///< smart: window size (0 = half the items)
  double replace_rate = 0.2;    ///< smart: r
  int replace_workers = 1;      ///< smart: replacer threads
};

/// One strategy's epoch.
struct EpochRecord {
  std::string strategy;
  int64_t epoch = 0;
  int64_t samples = 0;
  double wall_seconds = 0, samples_per_second = 0;
  double step_ms_mean = 0, step_ms_p50 = 0, step_ms_p95 = 0;  ///< model step time
  double data_wait_seconds = 0;                               ///< the step waited for data this long
  double model_idle_fraction = 0;                             ///< data_wait_seconds / wall_seconds
  double hit_rate = 0;                                        ///< items served from the cache
  uint64_t bytes_cached = 0;
  uint64_t peak_rss_bytes = 0;
  double boundary_blocked_seconds = 0;  ///< smart: waiting for the replacer at the epoch start
  /// The process's CPU time in the epoch (every thread: the step, the loaders, the replacer), and
  /// samples per CPU-second: what other processes on the cores change little, unlike the wall rate.
  double cpu_seconds = 0, samples_per_cpu_second = 0;
};

/// H,W of the deterministic stage's resize of array items (empty: none); images take the whole spec
/// in their source instead. A spec an array cannot take (--resize S, --center-crop, --normalize,
/// --exif-transpose) is refused for arrays: Error(usage).
std::vector<int64_t> array_resize(const BenchOptions& opts);

/// The checks of `opts` that need no data and no LibTorch: Error(usage) naming the option.
void validate_options(const BenchOptions& opts);

/// --files DIR: the items its meta.json describes ({"count": N, "dims": [...], "labels": [...]});
/// labels all 0 when it names none. Error(no_input) without the file, Error(data) for another shape.
struct FileMeta {
  int64_t count = 0;
  std::vector<int64_t> dims, labels;
};
FileMeta read_file_meta(const std::string& dir);

/// --data's column of items: --dataset, else "images" in HDF5, else the source's default.
std::string data_column(const BenchOptions& opts);

/// Error(data) naming `path` unless `col` holds uint8 items or decoded images.
void check_item_column(const io::source::Column& col, const std::string& path);

/// What can be told of the source without LibTorch, before it is loaded: --files' meta.json, and
/// --data's column when it is an HDF5 dataset or a NumPy array (image folders, manifests and tar
/// shards are listed once, by the run). The errors of the run's own reads.
void check_source(const BenchOptions& opts);

/// Runs every strategy for every epoch, calling `record` as each epoch finishes and `info` with
/// progress messages. Throws traincache::Error.
void run(const BenchOptions& opts, const std::function<void(const EpochRecord&)>& record,
         const std::function<void(const std::string&)>& info = {});

/// run in libtraincache_engines.so (base/module.h), loaded on the first call: a program that calls
/// this links no LibTorch and loads it only to benchmark (smart-bench). The same results and
/// errors; a module that cannot be loaded -> Error(unavailable).
void run_in_module(const BenchOptions& opts, const std::function<void(const EpochRecord&)>& record,
                   const std::function<void(const std::string&)>& info = {});

}  // namespace traincache::bench
