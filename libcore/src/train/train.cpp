#include "traincache/train/train.h"

#include <nlohmann/json.hpp>

#include "checkpointer.h"
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
void describe_run(const TrainOptions& o, const Setup& s, const Models& m, const Data& data, const TrainCallbacks& cb,
                  TrainResult& result) {
  result.mode = m.mode;
  result.objective = s.objective.name();
  result.precision = model::precision_choices().name(o.precision);
  result.math_mode = model::math_mode(s.device);
  result.utf8_replaced = data.utf8_replaced;
  if (data.utf8_replaced > 0 && cb.warn && s.rank == 0)
    cb.warn(std::to_string(data.utf8_replaced) +
            " ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)");
  if (!data.labels_warning.empty() && cb.warn && s.rank == 0) cb.warn(data.labels_warning);
}

// Every rank from the same weights (rank 0's), then each with its own randomness (dropout).
void start_ranks(train::RankGroup& group, const TrainOptions& o, const Setup& s, const Models& m,
                 const std::string& backend, const std::function<void(const std::string&)>& info) {
  group.start();
  info("rank 0 of " + std::to_string(s.world) + " (" + backend + "); every rank encodes 1/" + std::to_string(s.world) +
       " of each batch of " + std::to_string(o.batch_size));
  group.broadcast(unique_params(m.distinct), 0);
  if (s.rank > 0) torch::manual_seed(o.seed + 1000003ull * static_cast<uint64_t>(s.rank));
}

// Everything after connecting, on every rank; `group` is null for one process.
void train(TrainOptions& o, const Setup& s, train::RankGroup* group, const TrainCallbacks& cb, TrainResult& result,
           TextAhead* ahead) {
  auto info = [&](const std::string& msg) {
    if (cb.info && s.rank == 0) cb.info(msg);
  };
  check_local_device(s);
  torch::manual_seed(o.seed);

  Data data;
  Models m = load_models(o, s, data, ahead);
  load_or_stream(o, data, info);
  describe_run(o, s, m, data, cb, result);
  train::LossConfig loss = loss_config(o, s.objective);
  std::vector<int64_t> labels = m.grouped ? label_list(data.labels) : std::vector<int64_t>{};
  const RowSplit split = without_skipped(split_rows(o, data.rows, m.grouped ? &labels : nullptr), data.skipped, info);
  if (m.grouped) require_two_classes(s.objective, pick(labels, split.train));
  Evaluation eval = prepare_evaluation(o, s, data, split, m.grouped);
  if (s.objective.classifier) {
    attach_classifier(s, split, data, m, loss,
                      eval.use_external ? std::vector<Data*>{&eval.external} : std::vector<Data*>{});
    result.classes = m.classifier->attr("labels").toTensor().size(0);
  }
  if (group) start_ranks(*group, o, s, m, result.backend, info);
  open_windows(o, s, split.train, data);
  result.window_rows = data.window.cache_num;
  result.window_replace = data.window.replace_num;
  const StepPlan steps =
      plan_steps(o, data.window_rows ? data.window.cache_num : static_cast<int64_t>(split.train.size()));
  result.total_steps = steps.total;
  auto opt = make_optimizer(o, m.params);
  model::GradScaler scaler(o.precision == Precision::fp16);
  Checkpointer ckpt(o, s, group, checkpoint_config(o, s, m, split));
  ckpt.state = [&result, &scaler] {
    auto j = json::parse(best_to_json(result.best));
    if (scaler.enabled()) j["grad_scale"] = scaler.state();
    return json_text(j);
  };
  const int64_t start = ckpt.resume(m.params, *opt, result, info);
  result.start_step = start;
  if (auto st = json::parse(ckpt.resumed_state(), nullptr, false); st.is_object() && st.contains("grad_scale"))
    scaler.restore(st["grad_scale"].get<std::string>());
  MetricsLog metrics(s.rank == 0 ? o.metrics : "", start);
  MetricsLog batch_log(s.rank == 0 ? o.batch_log : "", start);
  result.best = best_from_json(ckpt.resumed_state());
  const RunContext run{o, s, group, data, m, loss, split, cb, info};
  Monitor monitor(run, eval, metrics, ckpt, result.best);
  monitor.set_optimizer(opt.get());
  if (m.grouped && eval.enabled && cb.warn && s.rank == 0) warn_about_labels(labels, split, eval, data, m, cb.warn);
  std::vector<int64_t>().swap(labels);  // per-row memory: only what the loop needs stays
  if (eval.enabled && start == 0) {
    monitor.evaluate(0, 0, &result.eval_before);
    if (s.rank == 0 && cb.evaluated_before) cb.evaluated_before(result.eval_before);
  }

  Trainer trainer(run, *opt, steps, scaler);
  auto t_loop = Clock::now();
  const int64_t reached = trainer.run(start, ckpt, metrics, batch_log, result,
                                      [&](int64_t n) { return monitor.after_step(n, steps.total, steps.per_epoch); });
  result.steps_done = reached;
  result.window_epochs = trainer.window_epochs();
  result.data_cache = data_cache_stats(data);
  double loop_s = seconds_since(t_loop);
  result.samples_per_second = loop_s > 0 ? trainer.samples() / loop_s : 0;
  result.seconds_per_epoch = reached > start ? loop_s / (reached - start) * steps.per_epoch : 0;
  if (eval.enabled && !result.interrupted) {
    if (group) group->set_context("final evaluation");
    result.eval_after = monitor.final_evaluation(reached, reached > 0 ? (reached - 1) / steps.per_epoch : 0);
  }
  if (ckpt.enabled() && (result.interrupted || result.stopped_early || reached == steps.total) && reached > start) {
    if (group) group->set_context("final checkpoint");
    ckpt.save(reached, m.params, *opt);
    result.checkpoint = ckpt.path();
  }
  if (group) {
    result.collectives = group->collectives();
    result.collective_seconds = group->collective_seconds();
  }
  if (!result.interrupted && s.rank == 0) write_final_outputs(o, m, eval, result.best, cb);
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
    train(o, s, group.get(), cb, result, ahead);
  } catch (const std::exception& e) {
    if (group) group->report_failure(e);  // the other ranks stop with this reason
    throw;
  }
  result.contention = watch.stop();
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::train
