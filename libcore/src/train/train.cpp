#include "traincache/train/train.h"

#include <nlohmann/json.hpp>

#include "checkpointer.h"
#include "context.h"
#include "data.h"
#include "evaluation.h"
#include "models.h"
#include "setup.h"
#include "step.h"
#include "traincache/base/json_text.h"
#include "traincache/base/timing.h"
#include "traincache/model/precision_torch.h"

using nlohmann::json;

namespace traincache::train {

namespace {

// What the result says of the run before it starts (mode, objective, precision), and rank 0's
// warnings about the data (replaced UTF-8, labels).
void describe_run(const TrainRun& r) {
  TrainResult& result = r.result;
  result.mode = r.m.mode;
  result.objective = r.s.objective.name();
  result.precision = model::precision_choices().name(r.o.precision);
  result.math_mode = model::math_mode(r.s.device);
  result.utf8_replaced = r.data.utf8_replaced;
  if (r.data.utf8_replaced > 0 && r.cb.warn && r.s.rank == 0)
    r.cb.warn(std::to_string(r.data.utf8_replaced) +
              " ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)");
  if (!r.data.labels_warning.empty() && r.cb.warn && r.s.rank == 0) r.cb.warn(r.data.labels_warning);
}

// Every rank from the same weights (rank 0's), then each with its own randomness (dropout).
void start_ranks(TrainRun& r) {
  r.group->start();
  r.info("rank 0 of " + std::to_string(r.s.world) + " (" + r.result.backend + "); every rank encodes 1/" +
         std::to_string(r.s.world) + " of each batch of " + std::to_string(r.o.batch_size));
  r.group->broadcast(unique_params(r.m.distinct), 0);
  if (r.s.rank > 0) torch::manual_seed(r.o.seed + 1000003ull * static_cast<uint64_t>(r.s.rank));
}

// The data and the models that train on it, and what the result says of them.
void load(TrainRun& r, TextAhead* ahead) {
  check_local_device(r.s);
  torch::manual_seed(r.o.seed);
  r.m = load_models(r.o, r.s, r.data, ahead);
  load_or_stream(r.o, r.data, r.info);
  describe_run(r);
}

// The loss, the split, the evaluation, the classifier, the ranks' start and the data cache's
// windows. Returns grouped mode's labels of every row, for the warnings about them.
std::vector<int64_t> plan(TrainRun& r) {
  r.loss = loss_config(r.o, r.s.objective);
  std::vector<int64_t> labels = r.m.grouped ? label_list(r.data.labels) : std::vector<int64_t>{};
  r.split = without_skipped(split_rows(r.o, r.data.rows, r.m.grouped ? &labels : nullptr), r.data.skipped, r.info);
  if (r.m.grouped) require_two_classes(r.s.objective, pick(labels, r.split.train));
  r.eval = prepare_evaluation(r);
  if (r.s.objective.classifier) attach_classifier(r);
  if (r.group) start_ranks(r);
  open_windows(r.o, r.s, r.split.train, r.data);
  r.result.window_rows = r.data.window.cache_num;
  r.result.window_replace = r.data.window.replace_num;
  return labels;
}

// What the step loop keeps: its plan, the optimiser and loss scaler, the checkpoints (a resumed
// run's state restored: `start` is its first step) and the logs.
struct Loop {
  explicit Loop(TrainRun& r)
      : steps(
            plan_steps(r.o, r.data.window_rows ? r.data.window.cache_num : static_cast<int64_t>(r.split.train.size()))),
        opt(make_optimizer(r.o, r.m.params)),
        scaler(r.o.precision == Precision::fp16),
        ckpt(r.o, r.s, r.group, checkpoint_config(r.o, r.s, r.m, r.split)),
        start(resume(r)),
        metrics(r.s.rank == 0 ? r.o.metrics : "", start),
        batch_log(r.s.rank == 0 ? r.o.batch_log : "", start) {}
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  StepPlan steps;
  std::unique_ptr<torch::optim::Optimizer> opt;
  model::GradScaler scaler;
  Checkpointer ckpt;
  int64_t start;
  MetricsLog metrics, batch_log;

 private:
  int64_t resume(TrainRun& r) {
    r.result.total_steps = steps.total;
    ckpt.state = [&result = r.result, this] {
      auto j = json::parse(best_to_json(result.best));
      if (scaler.enabled()) j["grad_scale"] = scaler.state();
      return json_text(j);
    };
    const int64_t first = ckpt.resume(r.m.params, *opt, r.result, r.info);
    r.result.start_step = first;
    if (auto st = json::parse(ckpt.resumed_state(), nullptr, false); st.is_object() && st.contains("grad_scale"))
      scaler.restore(st["grad_scale"].get<std::string>());
    r.result.best = best_from_json(ckpt.resumed_state());
    return first;
  }
};

// The steps from loop.start on, timed; returns the step reached.
int64_t run_steps(TrainRun& r, Loop& loop, Monitor& monitor) {
  Trainer trainer(r, *loop.opt, loop.steps, loop.scaler);
  const auto t_loop = Clock::now();
  const int64_t reached = trainer.run(loop.start, loop.ckpt, loop.metrics, loop.batch_log, r.result, [&](int64_t n) {
    return monitor.after_step(n, loop.steps.total, loop.steps.per_epoch);
  });
  TrainResult& result = r.result;
  result.steps_done = reached;
  result.window_epochs = trainer.window_epochs();
  result.data_cache = data_cache_stats(r.data);
  const double loop_s = seconds_since(t_loop);
  result.samples_per_second = loop_s > 0 ? trainer.samples() / loop_s : 0;
  result.seconds_per_epoch = reached > loop.start ? loop_s / (reached - loop.start) * loop.steps.per_epoch : 0;
  return reached;
}

// After the steps: the final evaluation, the final checkpoint, the collectives' counts, rank 0's
// outputs.
void finish(TrainRun& r, Loop& loop, Monitor& monitor, int64_t reached) {
  TrainResult& result = r.result;
  if (r.eval.enabled && !result.interrupted) {
    if (r.group) r.group->set_context("final evaluation");
    result.eval_after = monitor.final_evaluation(reached, reached > 0 ? (reached - 1) / loop.steps.per_epoch : 0);
  }
  const bool last = result.interrupted || result.stopped_early || reached == loop.steps.total;
  if (loop.ckpt.enabled() && last && reached > loop.start) {
    if (r.group) r.group->set_context("final checkpoint");
    loop.ckpt.save(reached, r.m.params, *loop.opt);
    result.checkpoint = loop.ckpt.path();
  }
  if (r.group) {
    result.collectives = r.group->collectives();
    result.collective_seconds = r.group->collective_seconds();
  }
  if (!result.interrupted && r.s.rank == 0) write_final_outputs(r);
}

// Everything after connecting, on every rank.
void train(TrainRun& r, TextAhead* ahead) {
  load(r, ahead);
  std::vector<int64_t> labels = plan(r);
  Loop loop(r);
  Monitor monitor(r, loop.metrics, loop.ckpt);
  monitor.set_optimizer(loop.opt.get());
  if (r.m.grouped && r.eval.enabled && r.cb.warn && r.s.rank == 0) warn_about_labels(r, labels);
  std::vector<int64_t>().swap(labels);  // per-row memory: only what the loop needs stays
  if (r.eval.enabled && loop.start == 0) {
    monitor.evaluate(0, 0, &r.result.eval_before);
    if (r.s.rank == 0 && r.cb.evaluated_before) r.cb.evaluated_before(r.result.eval_before);
  }
  finish(r, loop, monitor, run_steps(r, loop, monitor));
}

}  // namespace

TrainResult run_train(const TrainOptions& given, const TrainCallbacks& cb, TextAhead* ahead) {
  auto t_start = Clock::now();
  TrainOptions o = given;
  const Setup s = resolve_setup(o);
  if (o.data_cache.mode != data_cache::Mode::none) o.stream = true;  // a data cache keeps streamed rows
  TrainResult result;
  result.rank = s.rank;
  result.world_size = s.world;
  result.threads = at::get_num_threads();
  auto group = connect(o, s, result);
  CpuContentionWatch watch;
  try {
    TrainRun run(o, s, group.get(), cb, result);
    train(run, ahead);
  } catch (const std::exception& e) {
    if (group) group->report_failure(e);  // the other ranks stop with this reason
    throw;
  }
  result.contention = watch.stop();
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::train
