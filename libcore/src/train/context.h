// gc-train's engine: what the stages of one run share, built once by train() (train.cpp) when the
// data, the models, the objective and the split are known. The evaluation (Monitor) and the step
// loop (Trainer) take it instead of a reference apiece. docs/code-map.md shows every stage.
#pragma once

#include <functional>
#include <string>

namespace traincache::train {

struct TrainOptions;
struct TrainCallbacks;
struct RowSplit;
struct LossConfig;
class RankGroup;
struct Setup;
struct Data;
struct Models;

struct RunContext {
  const TrainOptions& o;  // resolved (load_or_stream may have set o.stream)
  const Setup& s;         // this process's rank, world, device, objective
  RankGroup* group;       // the process group; null for one process
  Data& data;
  Models& m;
  const LossConfig& loss;
  const RowSplit& split;
  const TrainCallbacks& cb;
  std::function<void(const std::string&)> info;  // rank 0's information lines; no-op elsewhere
};

}  // namespace traincache::train
