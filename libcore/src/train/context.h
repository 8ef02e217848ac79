// gc-train's engine: one run's state, made at its start (train.cpp) and filled in stage by stage:
// the options and this rank's setup, then the data and the models, the loss, the split and the
// evaluation. The stages, the evaluation (Monitor) and the step loop (Trainer) take it instead of
// a reference apiece. docs/code-map.md shows every stage.
#pragma once

#include <functional>
#include <string>

#include "data.h"
#include "evaluation.h"
#include "models.h"
#include "traincache/train/gradcache.h"
#include "traincache/train/train.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

class RankGroup;

struct TrainRun {
  TrainRun(TrainOptions& options, const Setup& setup, RankGroup* ranks, const TrainCallbacks& callbacks,
           TrainResult& out)
      : o(options), s(setup), group(ranks), cb(callbacks), result(out) {
    info = [this](const std::string& msg) {
      if (cb.info && s.rank == 0) cb.info(msg);
    };
  }
  TrainRun(const TrainRun&) = delete;
  TrainRun& operator=(const TrainRun&) = delete;

  // Known at the start.
  TrainOptions& o;   // resolved (load_or_stream may set o.stream)
  const Setup& s;    // this process's rank, world, device, objective
  RankGroup* group;  // the process group; null for one process
  const TrainCallbacks& cb;
  TrainResult& result;
  std::function<void(const std::string&)> info;  // rank 0's information lines; no-op elsewhere

  // Made by the stages, in this order (train.cpp): load, then plan.
  Data data;
  Models m;
  LossConfig loss;
  RowSplit split;
  Evaluation eval;
};

}  // namespace traincache::train
