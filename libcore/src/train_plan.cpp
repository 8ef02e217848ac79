#include "traincache/train_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "traincache/error.h"

namespace traincache {

const Choices<Similarity>& similarity_choices() {
  static const Choices<Similarity> c{{Similarity::cos, "cos"}, {Similarity::dot, "dot"}};
  return c;
}

}  // namespace traincache

namespace traincache::train {

RowSplit split_rows(const TrainOptions& o, int64_t rows) {
  RowSplit s;
  s.eval_begin = o.eval_begin;
  s.eval_end = o.eval_end > 0 ? std::min(o.eval_end, rows) : 0;
  if (o.eval_end > 0 && (s.eval_begin >= s.eval_end || s.eval_begin >= rows))
    throw Error(Exit::usage, "--eval-rows", "outside the data's " + std::to_string(rows) + " rows");
  for (int64_t i = 0; i < rows; ++i) (i >= s.eval_begin && i < s.eval_end ? s.eval : s.train).push_back(i);
  if (s.train.empty())
    throw Error(Exit::usage, "--eval-rows", "leaves no training rows (the data has " + std::to_string(rows) + ")");
  return s;
}

StepPlan plan_steps(const TrainOptions& o, int64_t train_rows) {
  if (o.batch_size > train_rows && o.drop_last)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " is larger than the " + std::to_string(train_rows) +
                    " training rows (use a smaller batch or --no-drop-last)");
  StepPlan p;
  p.per_epoch = o.drop_last ? train_rows / o.batch_size : (train_rows + o.batch_size - 1) / o.batch_size;
  p.total = o.steps > 0 ? o.steps : p.per_epoch * o.epochs;
  return p;
}

const Choices<Optimizer>& optimizer_choices() {
  static const Choices<Optimizer> c{{Optimizer::sgd, "sgd"}, {Optimizer::adamw, "adamw"}};
  return c;
}

const Choices<Schedule>& schedule_choices() {
  static const Choices<Schedule> c{
      {Schedule::constant, "constant"}, {Schedule::linear, "linear"}, {Schedule::cosine, "cosine"}};
  return c;
}

const Choices<DType>& float_dtype_choices() {
  static const Choices<DType> c{{DType::f32, "float32"}, {DType::f64, "float64"}};
  return c;
}

double scheduled_lr(const TrainOptions& o, int64_t step, int64_t total) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  if (o.schedule == Schedule::constant) return o.lr;
  double span = std::max<int64_t>(1, total - o.warmup_steps);
  double t = std::min(1.0, (step - o.warmup_steps) / span);
  if (o.schedule == Schedule::linear) return o.lr * (1.0 - t);
  return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
}

void validate_options(const TrainOptions& o) {
  if (!(o.temperature > 0)) throw Error(Exit::usage, "--temperature", "must be positive");
  if (o.batch_size <= 0 || o.query_chunk <= 0 || o.passage_chunk <= 0)
    throw Error(Exit::usage, "--batch-size", "batch and chunk sizes must be positive");
  // Raw datasets may also be shared-memory slabs ("shm:NAME"); --data is needed for the others.
  auto is_slab = [](const std::string& ds) { return ds.rfind("shm:", 0) == 0; };
  bool all_slabs = !o.query.empty() && !o.passage.empty();
  for (const auto* list : {&o.query, &o.passage, &o.negatives})
    for (const auto& ds : *list) all_slabs = all_slabs && is_slab(ds);
  if (!o.cache.empty() == (!o.data.empty() || all_slabs))
    throw Error(Exit::usage, "--data", "give exactly one of --data (raw inputs) and --cache (embeddings)");
  const bool text = !o.tokenizer.empty() || !o.query_tokenizer.empty() || !o.passage_tokenizer.empty();
  if (text && !o.cache.empty())
    throw Error(Exit::usage, "--tokenizer", "tokenizes raw text (--data); cached embeddings (--cache) need none");
  if (o.tokenize.max_length < 0) throw Error(Exit::usage, "--max-length", "must be positive");
}

}  // namespace traincache::train
