// gc-train's engine, stage 5: evaluation, the metrics log and the outputs.
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data.h"
#include "models.h"
#include "traincache/base/files.h"
#include "traincache/base/json_text.h"
#include "traincache/train/eval_stats.h"
#include "traincache/train/evaluate.h"

namespace traincache::train {

class Checkpointer;
struct TrainRun;

// Rows encoded of all an evaluation encodes, for a progress display (may be empty).
using EvalProgress = std::function<void(int64_t done, int64_t total)>;

/// Per-query metrics of the rows `idx` of `d` through the towers of `m` (docs/gc-train.md,
/// "Metrics"), encoded in chunks of the larger of --query-chunk and --passage-chunk, at --eval-k.
train::QueryTable evaluate(const Data& d, const torch::Tensor& idx, const Models& m, const train::LossConfig& loss,
                           const TrainOptions& o, const EvalProgress& progress);

// Held-out rows of the training data, or a separate file with the same layout (--eval-data);
// the per-query results of every evaluation for --eval-dump.
struct Evaluation {
  Data external;
  torch::Tensor idx;
  bool enabled = false, use_external = false;
  std::string dump;  // TSV lines so far

  EvalMetrics run(const TrainOptions& o, const Data& data, Models& m, const train::LossConfig& loss, int64_t step,
                  const EvalProgress& progress) {
    for (auto* mod : m.distinct) mod->eval();
    auto table = evaluate(use_external ? external : data, idx, m, loss, o, progress);
    for (auto* mod : m.distinct) mod->train();
    EvalMetrics r;
    r.present = true;
    r.rows = idx.size(0);
    r.queries = static_cast<int64_t>(table.rows.size());
    r.excluded = table.excluded;
    r.metrics = train::summarise(table, o.eval_bootstrap, o.seed);
    if (!o.eval_dump.empty()) dump += train::dump_tsv(table, step, dump.empty());
    return r;
  }

  void write_dump(const TrainOptions& o) const {
    if (!o.eval_dump.empty() && !dump.empty()) files::write_file_atomically(o.eval_dump, dump);
  }

  // Evaluation rows whose label has no class (classifier objectives).
  int64_t unknown_classes(const Data& data) const {
    const Data& d = use_external ? external : data;
    return d.classes.index_select(0, idx.to(d.classes.device())).lt(0).sum().item<int64_t>();
  }

  // The labels of the evaluation rows (grouped mode).
  std::vector<int64_t> labels(const Data& data) const {
    const Data& d = use_external ? external : data;
    return label_list(d.labels.index_select(0, idx.to(d.labels.device())));
  }
};

/// The evaluation rows (or --eval-data) of a run, once its data, models and split are known;
/// --eval-dump and --classifier-out's directories checked.
Evaluation prepare_evaluation(const TrainRun& r);

// --metrics: one JSON line per step, written through at once; write errors are exit 74. Opened as
// files::open_log() says: a planted link or FIFO is refused (73), never followed. A run resumed at
// `resume_step` (> 0) appends, after cutting the lines of later steps that the run it resumes wrote
// before it died: the resumed run writes them again.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, int64_t resume_step);
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const nlohmann::ordered_json& line) {
    if (fd_ < 0) return;
    const std::string text = json_text(line) + "\n";
    files::write_all(fd_, text.data(), text.size(), path_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Every evaluation of a run: before training, every --eval-every steps, after training. Rank 0
// evaluates; with --select-best a new best writes --out at once (and DIR/best.pt, which every rank
// takes part in), and --early-stop ends the run when the best has not moved for long enough.
class Monitor {
 public:
  // The run's evaluation (run.eval), its best so far in run.result.best.
  Monitor(TrainRun& run, MetricsLog& log, Checkpointer& ckpt);

  // Evaluates at `step` (every rank calls it; only rank 0 computes). `out`, when given, receives
  // the metrics. Returns true on rank agreement that --early-stop's patience has run out.
  bool evaluate(int64_t step, int64_t epoch, EvalMetrics* out = nullptr, bool during = false);

  // The loop's hook after step n: an evaluation when --eval-every says so (not at the last step,
  // which the final evaluation covers).
  bool after_step(int64_t n, int64_t total, int64_t per_epoch);

  void set_optimizer(torch::optim::Optimizer* opt) { opt_ = opt; }

  // The evaluation after training, at `step`: the last one again when it was at that step (a run
  // that --early-stop ended), without evaluating twice.
  EvalMetrics final_evaluation(int64_t step, int64_t epoch);

 private:
  static double value_of(const EvalMetrics& r, const std::string& key);

  const TrainOptions& o_;
  const Setup& s_;
  train::RankGroup* group_;
  Evaluation& eval_;
  const Data& data_;
  Models& m_;
  const train::LossConfig& loss_;
  MetricsLog& log_;
  Checkpointer& ckpt_;
  const TrainCallbacks& cb_;
  BestRecord& best_;
  torch::optim::Optimizer* opt_ = nullptr;
  EvalMetrics last_;  // rank 0: the latest evaluation
  int64_t last_step_ = -1;
};

/// Warnings about the labels of grouped mode, `labels` being every row's (rank 0, with an evaluation).
void warn_about_labels(const TrainRun& r, const std::vector<int64_t>& labels);
/// Rank 0's outputs after a run that was not interrupted: --out and --eval-dump.
void write_final_outputs(TrainRun& r);

}  // namespace traincache::train
