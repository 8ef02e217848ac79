// gc-train's engine, stage 1: the options resolved once, and the connection of a data-parallel job.
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <memory>

#include "traincache/train/dist.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/train.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

// What the options resolve to once: the launch, devices and float type.
struct Setup {
  train::Launch launch;
  int rank = 0, world = 1;
  torch::Device device{torch::kCPU}, cache_device{torch::kCPU};
  bool device_from_local_rank = false;  // --device cuda with no index, data parallel
  torch::Dtype float_type = torch::kFloat32;
  bool cached = false;
  ObjectiveSpec objective;
};

/// Resolves the options once (launch, devices, threads, precision, objective) and validates them.
Setup resolve_setup(const TrainOptions& o);
/// Data parallelism: this rank's connection to the job (null for one process).
std::unique_ptr<train::RankGroup> connect(const TrainOptions& o, const Setup& s, TrainResult& result);
/// This rank's GPU exists (69 before any model is loaded).
void check_local_device(const Setup& s);

}  // namespace traincache::train
