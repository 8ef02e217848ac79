// gc-train's engine, stage 4: checkpoints (--checkpoint-dir, --resume).
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models.h"
#include "setup.h"
#include "traincache/base/files.h"

namespace traincache::train {

// --checkpoint-dir: locked by rank 0 for the whole run, read on --resume, written by rank 0 with
// every rank's generator state (gathering them is a collective: every rank calls save()).
class Checkpointer {
 public:
  Checkpointer(const TrainOptions& o, const Setup& s, train::RankGroup* group, std::string config);

  const std::string& path() const { return path_; }
  bool enabled() const { return !path_.empty(); }

  // The step to start from: the checkpoint's with --resume, else 0; every rank must agree.
  int64_t resume(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt, TrainResult& result,
                 const std::function<void(const std::string&)>& info);

  // A collective in a data-parallel run: every rank calls it. `best`: DIR/best.pt instead.
  void save(int64_t step, const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt, bool best = false);

  /// The progress record saved with every checkpoint (the best evaluation so far).
  std::function<std::string()> state;
  /// The record of the checkpoint --resume loaded ("{}" otherwise).
  const std::string& resumed_state() const { return resumed_state_; }

 private:
  const TrainOptions& o_;
  const Setup& s_;
  train::RankGroup* group_;
  std::string config_, path_, resumed_state_ = "{}";
  std::unique_ptr<files::OutputLock> lock_;
};

/// What a checkpoint must have been written with to be resumed by this run.
std::string checkpoint_config(const TrainOptions& o, const Setup& s, Models& m, const RowSplit& split);

}  // namespace traincache::train
