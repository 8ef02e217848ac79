// The pure stages of gc-train's engine, without tensors: which rows train and which are held
// out, how many steps a run takes, and the learning rate of each step. Torch-free, so unit tests
// cover them without LibTorch (docs/design.md, "Stages").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traincache/train/train.h"

namespace traincache::io::cache {
struct CacheInfo;
}  // namespace traincache::io::cache

namespace traincache::train {

/// Rows of the training data split into training rows and held-out evaluation rows (--eval-rows,
/// --eval-split). Both lists ascending.
struct RowSplit {
  std::vector<int64_t> train, eval;
  int64_t eval_begin = 0, eval_end = 0;  ///< the held-out range as used ([0, 0) when none)
};

/// The rules of --eval-split, --eval-rows and --stratify that need no data (`labelled`: the rows
/// have labels, grouped mode): Error(usage) for both kinds of split, --stratify without
/// --eval-split, and --stratify without labels. split_rows applies them first.
void check_split_options(const TrainOptions& o, bool labelled);

/// Splits `rows` rows by the options' --eval-rows, or --eval-split F: a seeded random fraction,
/// per label when --stratify (`labels` holds one per row; each class of n >= 2 rows gives
/// round(F*n) of them, at least 1 and at most n-1). Error(usage) for a range outside the data,
/// --stratify without labels, or a split that leaves no training or no evaluation rows.
RowSplit split_rows(const TrainOptions& o, int64_t rows, const std::vector<int64_t>* labels = nullptr);

/// Warnings about an evaluation set's labels against the training set's: classes that training
/// has and evaluation lacks, and a total variation distance between the two label distributions
/// above 0.2. Empty when they look alike.
std::vector<std::string> label_balance_warnings(const std::vector<int64_t>& train_labels,
                                                const std::vector<int64_t>& eval_labels);

/// The metric keys an evaluation reports: pair modes accuracy/precision/recall_at_k, mrr_at_10,
/// ndcg_at_10, map_at_100; grouped mode precision_at_k, r_precision, map_at_r, and with a
/// classifier accuracy_at_k (the true class among the k highest logits).
std::vector<std::string> metric_keys(bool grouped, const std::vector<int64_t>& ks, bool classifier = false);

/// The objective a run trains, from --loss, --symmetric, --margin, --scale and --mining with
/// their defaults filled in.
struct ObjectiveSpec {
  Objective kind = Objective::infonce;
  bool symmetric = false;
  Mining mining = Mining::automatic;  ///< batch_hard or semi_hard for triplet
  double margin = 0, scale = 0;       ///< as used (0 where the loss has none)
  bool classifier = false;            ///< softmax, arcface, cosface: a trained classifier
  std::string name() const;           ///< "infonce", "symmetric", "supcon", "softmax", ..., "triplet"
};

/// Resolves the objective for a run over pairs or, `labelled`, over rows with labels (grouped
/// mode). Error(usage) for a loss of the other kind of data, and for --symmetric, --margin,
/// --scale, --mining or --classifier-out with a loss they do not apply to, or out of range.
ObjectiveSpec resolve_objective(const TrainOptions& o, bool labelled);

/// Error(data, "--loss", ...) when the training rows' labels hold one class and the objective
/// needs two: softmax, ArcFace and CosFace (one class is always right) and triplet (no negative)
/// would train nothing at loss 0.
void require_two_classes(const ObjectiveSpec& spec, const std::vector<int64_t>& train_labels);

/// An evaluation as JSON: rows, queries, excluded, every metric and, with intervals, ci95 (each
/// metric's [low, high]). gc-train's --json and --metrics write this.
nlohmann::ordered_json eval_json(const EvalMetrics& m);

/// Takes an evaluation's value of the record's metric at `step`: true when it beats the best so
/// far (or is the first), which resets the count of evaluations since the best. A value that is
/// not finite (a metric with no evaluation queries) is never a best.
bool update_best(BestRecord& r, double value, int64_t step);

/// --early-stop: true when `patience` > 0 evaluations in a row have not improved the best.
inline bool patience_exhausted(const BestRecord& r, int64_t patience) { return patience > 0 && r.since >= patience; }

/// The record as the JSON text a checkpoint keeps, and back ("{}" or "" gives an empty record).
std::string best_to_json(const BestRecord& r);
BestRecord best_from_json(const std::string& text);

/// Steps of one epoch and of the whole run.
struct StepPlan {
  int64_t per_epoch = 0, total = 0;
};

/// Steps for `train_rows` training rows: --steps, or --epochs whole epochs (the last partial batch
/// dropped unless --no-drop-last). Error(usage) when the batch is larger than the data and dropped.
StepPlan plan_steps(const TrainOptions& o, int64_t train_rows);

/// The learning rate of 0-based step `step` of `total`: linear warmup from 0 over --warmup-steps,
/// then constant, linear decay or cosine decay to 0 at the last step.
double scheduled_lr(const TrainOptions& o, int64_t step, int64_t total);

/// Checks every rule of the options that needs no data (dtype, optimiser, schedule, temperature,
/// batch and chunk sizes, exactly one of --data and --cache, evaluation, checkpoints, the data
/// cache's rules, and the datasets and modules of the mode: validate_raw_sides or
/// validate_cached_sides). Error(usage) otherwise. run_train() calls it first, before any data or
/// model is loaded, so that every caller gets the same refusals.
void validate_options(const TrainOptions& o);

/// Whether the options name grouped mode: rows with labels (--data with --labels, or --cache with
/// --embeddings) rather than pairs.
bool grouped_mode(const TrainOptions& o);

/// What else the options decide without data: the objective (resolve_objective), --select-best
/// (validate_selection) and check_split_options, for the mode the options name. gc-train applies
/// it before it loads LibTorch; run_train applies the same rules itself.
void check_plan(const TrainOptions& o);

/// --data's tensor datasets of a pair run in an HDF5 or .npz file, whose rows its metadata tells:
/// each opened as load_raw opens it (Error for a missing file or dataset, or strings), and the
/// query's and passages' datasets of as many rows (same_rows). Nothing for other sources
/// (manifests, tar shards, folders, slabs, .npy files: the engine opens those once), text sides
/// (read_text_ahead), raw grouped runs and data caches: load_raw checks those.
void check_raw_columns(const TrainOptions& o);

/// The tokenizer file of a side (its own, else --tokenizer), or "" when the side is not text.
std::string side_tokenizer(const TrainOptions& o, bool query);

/// Raw mode: --query with --passage (pairs) or --labels (grouped), their datasets (text sides: one
/// field of --data), --negatives per passage dataset, and --encoder or both separate encoders.
void validate_raw_sides(const TrainOptions& o);

/// Cached mode: --embeddings (grouped) or both --query-embeddings and --passage-embeddings.
void validate_cached_sides(const TrainOptions& o);

/// Cached mode: what `info` (the cache at `path`, --cache or --eval-data) must hold for the run:
/// complete, labels when `grouped`, the named encoders, and aligned sides of one width.
/// Error(data) naming `path` otherwise. load_cached checks the data with it; check_cached_files
/// checks the files with it before LibTorch is loaded.
void check_cached_info(const TrainOptions& o, const io::cache::CacheInfo& info, const std::string& path, bool grouped);

/// Cached mode: --cache and a cached --eval-data read (their descriptions only) and checked with
/// check_cached_info; missing, not HDF5 or not a cache as io::cache::read_info says. Nothing in raw
/// mode. Needs no LibTorch: run_train_in_module calls it before loading LibTorch in a run of one
/// process (the ranks of a data-parallel job meet first, so that one rank's failure reaches all).
void check_cached_files(const TrainOptions& o);

/// --resume: the checkpoint of --checkpoint-dir, when there is one, checked against its digest
/// (check_checkpoint_digest, checkpoint_file.h). Needs no LibTorch: run_train_in_module calls it
/// with check_cached_files; load_checkpoint checks the file again, and everything else in it.
void check_resume_file(const TrainOptions& o);

/// --select-best names a metric the mode reports (metric_keys) for the objective `spec`.
void validate_selection(const TrainOptions& o, const ObjectiveSpec& spec);

/// The rules of --data-cache, --data-cache-limit and --data-cache-keep: a data cache keeps raw
/// inputs (not --cache), the limit belongs to stochastic:F, and a SmartCache window is never kept.
/// Error(usage) otherwise. A data cache implies streaming: run_train() sets `stream` itself.
void validate_data_cache(const TrainOptions& o);

}  // namespace traincache::train
