// gc-train's engine, stage 3: the trained modules, their towers, optimiser and loss.
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data.h"
#include "setup.h"
#include "traincache/train/gradcache.h"
#include "traincache/train/objectives.h"

namespace traincache::train {

struct TrainRun;

// The trained modules, their towers and parameters, and the settings a checkpoint must match.
struct Models {
  std::vector<torch::jit::Module> modules;  // 1 (tied or head) or 2 (separate)
  torch::jit::Module *q = nullptr, *p = nullptr;
  std::vector<torch::jit::Module*> distinct;
  std::vector<torch::Tensor> params;
  train::Tower q_tower, p_tower;
  std::optional<torch::jit::Module> classifier;  // softmax, arcface, cosface (in `distinct` too)
  bool grouped = false;
  bool q_by_length = false, p_by_length = false;  // text sides trimmed per chunk: chunks by token count
  std::string mode;
  nlohmann::json config;
};

/// The training data (into `data`) and the modules that train on it.
Models load_models(const TrainOptions& o, const Setup& s, Data& data, TextAhead* ahead);
/// The distinct parameters of `mods`, each once.
std::vector<torch::Tensor> unique_params(const std::vector<torch::jit::Module*>& mods);
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        const std::vector<torch::Tensor>& params);
/// The loss of the objective `spec`.
train::LossConfig loss_config(const TrainOptions& o, const ObjectiveSpec& spec);
/// The classifier of softmax, arcface and cosface (into r.m and r.loss), with each row's class in
/// r.data and the evaluation's --eval-data; its classes in r.result.
void attach_classifier(TrainRun& r);
/// --out (and --passage-out, --classifier-out): the trained modules as TorchScript.
void save_outputs(const TrainOptions& o, Models& m);

}  // namespace traincache::train
