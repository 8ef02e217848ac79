// gc-train's engine, stage 6: the step loop.
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "context.h"
#include "traincache/model/precision_torch.h"
#include "traincache/train/gradcache.h"
#include "traincache/train/train.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

class Checkpointer;
class MetricsLog;

// Steps [start, total): batch b of epoch e is rows perm_e[bB, (b+1)B) of the training rows
// (perm_e = identity without shuffle); data parallel, rank r encodes [rB/W, (r+1)B/W) of each.
// With --data-cache smart:N,r epoch e trains on the window's N rows (keys [eR, eR+N), in the
// order perm_e of N), read through the window caches of the columns.
class Trainer {
 public:
  Trainer(TrainRun& run, torch::optim::Optimizer& opt, const StepPlan& steps, model::GradScaler& scaler);

  // Runs from `start`; returns the step reached. Stops early (result.interrupted) on SIGINT/SIGTERM
  // on any rank, after the same step everywhere.
  // `after_step(n)` runs after step n (1-based) on every rank: true ends the run there.
  int64_t run(int64_t start, Checkpointer& ckpt, MetricsLog& metrics, MetricsLog& batch_log, TrainResult& result,
              const std::function<bool(int64_t)>& after_step);

  int64_t samples() const { return samples_; }

  // The epochs this run began, with the wait of each one's first step.
  std::vector<WindowEpoch> window_epochs() const;

 private:
  // One epoch's order of the training rows (positions in the split's list), kept while its steps
  // run (one per thread); none without shuffling.
  struct EpochPerm {
    int64_t epoch = -1;
    std::vector<int64_t> perm;
  };

  // A batch: its rows, and (--data-cache smart) their keys in the SmartCache window.
  struct Batch {
    torch::Tensor idx;
    std::vector<int64_t> keys;
  };

  // The rows of step s's batch; `cache` holds the permutation of the epoch last asked for. Only
  // the permutation grows with the data (8 bytes a row); the batch's rows are looked up from it.
  // No torch operation here: the streaming reader calls this on its own thread (shuffle.h).
  Batch rows_of_step(int64_t s, EpochPerm& cache) const;

  // --data-cache smart: before the rows of step s are read (by the thread that reads them), the
  // first step of an epoch begins it for every window cache (the replacer moves on to the rows
  // entering next, unless it is the last epoch), recording what the boundary found.
  void window_boundary(int64_t start, int64_t s);

  // This process's share of the batch `idx`: all of it, or rank r's [rB/W, (r+1)B/W) (empty when
  // the batch has fewer rows than ranks: the step is skipped).
  torch::Tensor own_rows(const torch::Tensor& idx) const;

  // The batch and the encoders' inputs for this process's share of it, read and converted (a
  // streamed side reads them now); no inputs when the step is skipped.
  struct BatchInputs {
    Batch batch;
    std::vector<torch::Tensor> query, passage;
  };
  BatchInputs inputs_of(Batch b) const;

  // One optimiser step on the batch `idx`, of which this process encodes `in`; returns the loss.
  double step(int64_t s, const torch::Tensor& idx, BatchInputs in, double lr, const Checkpointer& ckpt);

  const TrainOptions& o_;
  const Setup& s_;
  train::RankGroup* group_;
  Data& data_;
  Models& m_;
  torch::optim::Optimizer& opt_;
  const train::LossConfig& loss_;
  const std::vector<int64_t>& train_;  // the split's training rows (alive for the whole run)
  EpochPerm perm_;                     // the step loop's, without --stream (the reader computes the rows then)
  int64_t n_train_;
  StepPlan steps_;
  int64_t samples_ = 0;
  train::StepMode mode_;
  train::Parallel par_;
  model::GradScaler& scaler_;
  bool stop_all_ = false;  // data parallel: some rank was interrupted, all stop after the same step
  mutable std::mutex boundaries_mu_;
  std::vector<WindowEpoch> boundaries_;  // --data-cache smart: the epochs begun (by the reading thread)
  std::vector<double> first_waits_;      // and their first steps' waits (by the step loop)
  const TrainCallbacks& cb_;
  std::function<void(const std::string&)> info_;
};

}  // namespace traincache::train
