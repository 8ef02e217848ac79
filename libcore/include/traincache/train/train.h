// gc-train's engine: gradient-cached contrastive training on raw inputs (trainable TorchScript
// encoders) or on cached embeddings (a trainable head). Torch-free interface.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/base/cpu_contention.h"
#include "traincache/base/dtype.h"
#include "traincache/base/similarity.h"
#include "traincache/data_cache/data_cache.h"
#include "traincache/io/source.h"
#include "traincache/model/precision.h"
#include "traincache/text/tokenizer.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/eval_stats.h"

namespace traincache::train {

/// The optimiser (--optimizer).
enum class Optimizer { sgd, adamw };
/// The learning rate after warmup (--schedule): kept, or decayed linearly or as a cosine to 0.
enum class Schedule { constant, linear, cosine };

/// The objective (--loss). automatic: infonce for pairs, supcon for labelled rows.
enum class Objective { automatic, infonce, supcon, softmax, arcface, cosface, triplet };
/// Triplet mining (--mining); automatic: batch-hard.
enum class Mining { automatic, batch_hard, semi_hard };

const Choices<Objective>& objective_choices();  ///< without automatic
const Choices<Mining>& mining_choices();        ///< without automatic
const Choices<Optimizer>& optimizer_choices();
const Choices<Schedule>& schedule_choices();
/// The parameter and input dtypes gc-train accepts (--dtype): float32, float64.
const Choices<DType>& float_dtype_choices();

/// Everything that controls a training run. Defaults match the command line's.
struct TrainOptions {
  // Raw inputs: aligned datasets of one HDF5 file and trainable encoders.
  std::string data;
  std::vector<std::string> query, passage, negatives;  ///< datasets (several = several forward() args)
  bool stream = false;          ///< read each batch's rows from the data (and cache) instead of loading them whole
  data_cache::Spec data_cache;  ///< streamed numeric inputs' converted rows kept in shared slabs (implies stream)
  std::string encoder;          ///< tied: one encoder for both sides
  std::string query_encoder, passage_encoder;  ///< separate encoders
  double input_scale = 1.0 / 255.0;
  io::source::FileOptions files;  ///< raw mode from a manifest: preprocessing of its image paths
  // Raw text: a side whose fields are texts, tokenized once at load and padded per batch and
  // chunk (docs/text.md). --tokenizer FILE serves both sides; query=FILE or passage=FILE one.
  std::string tokenizer, query_tokenizer, passage_tokenizer;
  text::TokenizeOptions tokenize;  ///< also --pad-id: ragged sides (slabs of token ids)
  // Cached embeddings (after cache-fill) and a trainable head.
  std::string cache;
  std::string query_embeddings, passage_embeddings;  ///< aligned pairing: two encoders' names
  std::string embeddings;                            ///< grouped pairing: one encoder + labels
  std::string head = "mlp:256,128";                  ///< built-in spec or a TorchScript file
  std::string cache_device = "cpu";                  ///< where cached embeddings live
  std::map<std::string, std::string> cache_devices;  ///< per encoder name, overriding cache_device
  std::string cache_shm;                             ///< share embeddings through slabs "<name>-<encoder>"
  std::string labels;             ///< raw mode: the label dataset or field; training is then over the query side
  bool trust_slab_owner = false;  ///< attach to --cache-shm slabs of other users
  // Loss.
  Objective loss = Objective::automatic;
  double margin = std::numeric_limits<double>::quiet_NaN();  ///< NaN: the loss's default
  double scale = std::numeric_limits<double>::quiet_NaN();   ///< NaN: the loss's default
  Mining mining = Mining::automatic;
  Similarity similarity = Similarity::cos;
  double temperature = 0.05;
  bool symmetric = false;
  int64_t loss_chunk = 0;  ///< anchor rows per loss chunk (0: the query chunk; on CUDA, 2^25 logits)
  // Batches.
  int64_t batch_size = 64;
  int64_t query_chunk = 16, passage_chunk = 16;
  /// Text sides trimmed per chunk: a chunk's token slots (rows x its longest text) at most, the rows
  /// taken shortest first. -1: text::kDefaultMaxTokensCpu or kDefaultMaxTokensCuda by --device; 0:
  /// chunks of --chunk-size rows (still by length).
  int64_t max_tokens = -1;
  bool gradcache = true;
  bool drop_last = true;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t steps = 0;  ///< 0: use epochs
  int64_t epochs = 1;
  // Optimiser and schedule.
  Optimizer optimizer = Optimizer::adamw;
  double lr = 1e-3, momentum = 0, weight_decay = 0, clip_norm = 0;
  int64_t warmup_steps = 0;
  Schedule schedule = Schedule::constant;
  // Checkpoints, outputs, evaluation.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string out, passage_out, metrics;
  std::string batch_log;                  ///< JSON Lines: each step's rows (rank 0: the whole batch)
  std::string classifier_out;             ///< the classifier of softmax, arcface and cosface as TorchScript
  int64_t eval_begin = 0, eval_end = -1;  ///< held-out rows [begin, end) when end > 0
  double eval_split = 0;                  ///< or a seeded random fraction of the rows (0: none)
  bool stratify = false;                  ///< --eval-split per label (grouped mode)
  std::string eval_data;                  ///< or a separate file (same datasets/encoders)
  std::vector<int64_t> eval_k{1, 5, 10};  ///< cut-offs of the @k metrics, ascending
  int64_t eval_bootstrap = 0;             ///< resamples for 95% intervals (0: none)
  std::string eval_dump;                  ///< per-query results as TSV
  int64_t eval_every = 0;                 ///< also evaluate every N steps (0: before and after only)
  std::string select_best;                ///< keep --out (and DIR/best.pt) at this metric's best
  int64_t early_stop = 0;                 ///< stop after this many evaluations without a new best
  std::string device = "cpu";
  bool tf32 = true;  ///< CUDA: cuDNN may run float32 convolutions in TF32 (--no-tf32)
  int threads = 0;
  // Data parallelism (when the launcher's WORLD_SIZE > 1; see docs/distributed.md).
  train::Backend dist_backend = train::Backend::automatic;
  double dist_timeout = 1800;             ///< seconds a rank waits for the others
  DType dtype = DType::f32;               ///< f32 or f64 (parameters and inputs)
  Precision precision = Precision::fp32;  ///< bf16/fp16: encoders and heads under autocast
};

/// One evaluation of the held-out rows (docs/gc-train.md, "Metrics").
struct EvalMetrics {
  bool present = false;
  int64_t rows = 0;      ///< evaluation rows (all are candidates)
  int64_t queries = 0;   ///< rows the metrics average over
  int64_t excluded = 0;  ///< grouped mode: rows alone in their class, candidates only
  std::vector<train::Metric> metrics;
};

/// The best evaluation so far of --select-best's metric (higher is better), and how many
/// evaluations have not improved on it since (--early-stop). Kept in checkpoints.
struct BestRecord {
  std::string metric;
  double value = 0;
  int64_t step = -1;  ///< -1: no evaluation yet
  int64_t since = 0;  ///< evaluations since the best
};

/// What the SmartCache window found at the start of an epoch (--data-cache smart).
struct WindowEpoch {
  int64_t epoch = 0;
  uint64_t late_rows = 0;   ///< rows of the window not prepared by then (read as the steps ask for them)
  double wait_seconds = 0;  ///< the epoch's first step waited this long for its inputs
};

/// What a run did.
struct TrainResult {
  bool interrupted = false;
  int64_t steps_done = 0;  ///< global step reached
  int64_t start_step = 0;  ///< where this run started (resume)
  int64_t total_steps = 0;
  double last_loss = 0;
  double seconds = 0;
  double samples_per_second = 0;
  double seconds_per_epoch = 0;
  std::string mode;       ///< "raw-tied", "raw-separate", "raw-grouped", "cached-aligned", "cached-grouped"
  std::string objective;  ///< the loss trained: infonce, symmetric, supcon, softmax, arcface, ...
  std::string precision;  ///< fp32, bf16 or fp16 (--precision)
  std::string math_mode;  ///< float32 convolutions: "tf32" (cuDNN on a CUDA device, unless --no-tf32) or "ieee"
  int64_t classes = 0;    ///< classifier objectives: the classes of the training rows
  EvalMetrics eval_before, eval_after;
  BestRecord best;                              ///< with --select-best
  bool stopped_early = false;                   ///< --early-stop ended the run before its last step
  std::string checkpoint;                       ///< last checkpoint written or loaded
  int rank = 0, world_size = 1;                 ///< data parallelism: only rank 0 writes outputs
  std::string backend;                          ///< the process group's backend when world_size > 1
  int64_t collectives = 0;                      ///< collective operations this rank took part in
  double collective_seconds = 0;                ///< time in them (transfers and waiting for other ranks)
  int64_t utf8_replaced = 0;                    ///< ill-formed UTF-8 sequences of text fields replaced with U+FFFD
  std::optional<data_cache::Stats> data_cache;  ///< with --data-cache: this process's hits and misses
  int64_t window_rows = 0, window_replace = 0;  ///< --data-cache smart: N and R
  std::vector<WindowEpoch> window_epochs;       ///< --data-cache smart: the epochs this run began
  int threads = 1;                              ///< this process's intra-op threads
  CpuContention contention;                     ///< whether other processes held this process's cores
};

/// Per-step callback (step, total, loss) and informational messages.
struct TrainCallbacks {
  std::function<void(int64_t, int64_t, double)> progress;  ///< rank 0 only in a data-parallel run
  std::function<void(const std::string&)> info;            ///< rank 0 only in a data-parallel run
  std::function<void(const std::string&)> warn;            ///< rank 0 only in a data-parallel run
  /// An evaluation during training (--eval-every; not those before and after) at a step; `best`
  /// when it is a new best of --select-best's metric.
  std::function<void(int64_t, const EvalMetrics&, bool best)> evaluated;  ///< rank 0 only
  /// The evaluation before training, as soon as it is computed (rank 0 only).
  std::function<void(const EvalMetrics&)> evaluated_before;
  /// An evaluation's progress: rows encoded so far of all it encodes (queries, then passages).
  std::function<void(int64_t done, int64_t total)> eval_progress;  ///< rank 0 only
};

struct TextAhead;  // train/text_fields.h

/// Runs training. Throws traincache::Error with its exit code on failure. The text sides that
/// `ahead` holds (read before LibTorch was loaded) are taken from it, not read again.
TrainResult run_train(const TrainOptions& opts, const TrainCallbacks& cb = {}, TextAhead* ahead = nullptr);

/// run_train in libtraincache_engines.so (base/module.h), loaded on the first call: a program that
/// calls this links no LibTorch and loads it only to train (gc-train). The same results and
/// errors; a module that cannot be loaded -> Error(unavailable).
TrainResult run_train_in_module(const TrainOptions& opts, const TrainCallbacks& cb = {});

}  // namespace traincache::train
