#include "traincache/train/train_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "traincache/base/error.h"
#include "traincache/base/json_text.h"
#include "traincache/base/splitmix.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/source.h"
#include "traincache/train/checkpoint_file.h"
#include "traincache/train/text_fields.h"

namespace traincache {

const Choices<Similarity>& similarity_choices() {
  static const Choices<Similarity> c{{Similarity::cos, "cos"}, {Similarity::dot, "dot"}};
  return c;
}

}  // namespace traincache

namespace traincache::train {

namespace {

void shuffle(std::vector<int64_t>& v, SplitMix& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// The first round(F*n) rows of a seeded permutation of `rows` (per class with --stratify).
std::vector<int64_t> random_eval_rows(const TrainOptions& o, int64_t rows, const std::vector<int64_t>* labels) {
  SplitMix rng{o.seed ^ 0x5eedf00dull};
  std::map<int64_t, std::vector<int64_t>> groups;
  for (int64_t i = 0; i < rows; ++i) groups[o.stratify ? (*labels)[static_cast<std::size_t>(i)] : 0].push_back(i);
  std::vector<int64_t> eval;
  for (auto& [label, members] : groups) {
    shuffle(members, rng);
    const auto n = static_cast<int64_t>(members.size());
    auto k = static_cast<int64_t>(std::llround(o.eval_split * static_cast<double>(n)));
    if (o.stratify && n >= 2) k = std::clamp<int64_t>(k, 1, n - 1);
    eval.insert(eval.end(), members.begin(), members.begin() + std::min(k, n));
  }
  std::sort(eval.begin(), eval.end());
  return eval;
}

}  // namespace

void check_split_options(const TrainOptions& o, bool labelled) {
  if (o.eval_split > 0 && o.eval_end > 0)
    throw Error(Exit::usage, "--eval-split", "give --eval-split or --eval-rows, not both");
  if (o.stratify && o.eval_split <= 0) throw Error(Exit::usage, "--stratify", "applies to --eval-split");
  if (o.stratify && !labelled)
    throw Error(Exit::usage, "--stratify", "needs labels: grouped mode (--cache with --embeddings)");
}

RowSplit split_rows(const TrainOptions& o, int64_t rows, const std::vector<int64_t>* labels) {
  check_split_options(o, labels && static_cast<int64_t>(labels->size()) == rows);
  RowSplit s;
  if (o.eval_split > 0) {
    s.eval = random_eval_rows(o, rows, labels);
    std::size_t e = 0;
    for (int64_t i = 0; i < rows; ++i) {
      if (e < s.eval.size() && s.eval[e] == i)
        ++e;
      else
        s.train.push_back(i);
    }
    if (s.eval.empty())
      throw Error(Exit::usage, "--eval-split",
                  "holds out no rows of the data's " + std::to_string(rows) + " (use a larger fraction)");
    if (s.train.empty())
      throw Error(Exit::usage, "--eval-split", "leaves no training rows (the data has " + std::to_string(rows) + ")");
    return s;
  }
  s.eval_begin = o.eval_begin;
  s.eval_end = o.eval_end > 0 ? std::min(o.eval_end, rows) : 0;
  if (o.eval_end > 0 && (s.eval_begin >= s.eval_end || s.eval_begin >= rows))
    throw Error(Exit::usage, "--eval-rows", "outside the data's " + std::to_string(rows) + " rows");
  for (int64_t i = 0; i < rows; ++i) (i >= s.eval_begin && i < s.eval_end ? s.eval : s.train).push_back(i);
  if (s.train.empty())
    throw Error(Exit::usage, "--eval-rows", "leaves no training rows (the data has " + std::to_string(rows) + ")");
  return s;
}

std::vector<std::string> label_balance_warnings(const std::vector<int64_t>& train_labels,
                                                const std::vector<int64_t>& eval_labels) {
  std::vector<std::string> out;
  if (train_labels.empty() || eval_labels.empty()) return out;
  std::map<int64_t, double> p, q;
  for (auto l : train_labels) p[l] += 1.0 / static_cast<double>(train_labels.size());
  for (auto l : eval_labels) q[l] += 1.0 / static_cast<double>(eval_labels.size());
  std::vector<int64_t> missing;
  for (const auto& [label, share] : p)
    if (!q.count(label)) missing.push_back(label);
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < missing.size() && i < 10; ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.size() > 10) list += ", ...";
    out.push_back("the evaluation rows lack " + std::to_string(missing.size()) + " of the " + std::to_string(p.size()) +
                  " classes of the training rows (" + list + "); --eval-split F --stratify holds out every class");
  }
  double tv = 0;
  for (const auto& [label, share] : p) tv += std::abs(share - (q.count(label) ? q.at(label) : 0.0));
  for (const auto& [label, share] : q)
    if (!p.count(label)) tv += share;
  tv /= 2;
  // What drawing this many rows at random gives on average: sum of sqrt(p(1-p) / (2 pi n)).
  const double n = static_cast<double>(eval_labels.size());
  double noise = 0;
  for (const auto& [label, share] : p) noise += std::sqrt(share * (1 - share) / (2 * M_PI * n));
  if (tv > std::max(0.2, 3 * noise)) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "the evaluation rows' label distribution differs from the training rows' (total variation "
                  "distance %.2f; %zu rows drawn at random would differ by about %.2f)",
                  tv, eval_labels.size(), noise);
    out.emplace_back(buf);
  }
  return out;
}

std::vector<std::string> metric_keys(bool grouped, const std::vector<int64_t>& ks, bool classifier) {
  std::vector<std::string> out;
  const std::vector<std::string> at_k =
      grouped ? std::vector<std::string>{"precision"} : std::vector<std::string>{"accuracy", "precision", "recall"};
  for (const auto& m : at_k)
    for (auto k : ks) out.push_back(m + "_at_" + std::to_string(k));
  for (const char* m : grouped ? std::vector<const char*>{"r_precision", "map_at_r"}
                               : std::vector<const char*>{"mrr_at_10", "ndcg_at_10", "map_at_100"})
    out.emplace_back(m);
  if (classifier)
    for (auto k : ks) out.push_back("accuracy_at_" + std::to_string(k));
  return out;
}

std::string ObjectiveSpec::name() const {
  if (kind == Objective::infonce && symmetric) return "symmetric";
  return objective_choices().name(kind);
}

namespace {

// The value of --margin or --scale: the loss's default when not given, else checked.
double setting(double given, double fallback, const char* option, double low, double high, const char* range) {
  if (std::isnan(given)) return fallback;
  if (!(given >= low && given <= high)) throw Error(Exit::usage, option, std::string("must be ") + range);
  return given;
}

}  // namespace

ObjectiveSpec resolve_objective(const TrainOptions& o, bool labelled) {
  ObjectiveSpec s;
  s.kind = o.loss != Objective::automatic ? o.loss : labelled ? Objective::supcon : Objective::infonce;
  const std::string name = objective_choices().name(s.kind);
  if (labelled && s.kind == Objective::infonce)
    throw Error(Exit::usage, "--loss",
                "infonce trains on pairs (--query and --passage, or --query-embeddings and --passage-embeddings); "
                "labelled rows train with supcon, softmax, arcface, cosface or triplet");
  if (!labelled && s.kind != Objective::infonce)
    throw Error(Exit::usage, "--loss",
                name + " trains on labelled rows (--cache with --embeddings, or raw --query with --labels)");
  // A row alone in its batch has nothing to be told from: the loss is 0 whatever the weights.
  if (o.batch_size == 1 && (s.kind == Objective::supcon || s.kind == Objective::triplet ||
                            (s.kind == Objective::infonce && o.negatives.empty())))
    throw Error(Exit::usage, "--batch-size",
                "1: " + name + " contrasts the rows of a batch" +
                    (s.kind == Objective::infonce ? " (or a row's hard negatives, --negatives)" : "") +
                    ", and a row alone trains nothing; use 2 or more");
  s.symmetric = o.symmetric;
  if (o.symmetric && s.kind != Objective::infonce) throw Error(Exit::usage, "--symmetric", "applies to infonce only");
  const bool margin_loss = s.kind == Objective::arcface || s.kind == Objective::cosface;
  if (!std::isnan(o.margin) && !margin_loss && s.kind != Objective::triplet)
    throw Error(Exit::usage, "--margin", "applies to arcface, cosface and triplet, not " + name);
  if (!std::isnan(o.scale) && !margin_loss)
    throw Error(Exit::usage, "--scale", "applies to arcface and cosface, not " + name);
  if (o.mining != Mining::automatic && s.kind != Objective::triplet)
    throw Error(Exit::usage, "--mining", "applies to triplet, not " + name);
  s.classifier = margin_loss || s.kind == Objective::softmax;
  if (!o.classifier_out.empty() && !s.classifier)
    throw Error(Exit::usage, "--classifier-out", "needs a loss with a classifier (softmax, arcface or cosface)");
  if (s.kind == Objective::arcface)
    s.margin = setting(o.margin, 0.5, "--margin", 0, M_PI / 2, "an angle in radians from 0 to pi/2");
  if (s.kind == Objective::cosface) s.margin = setting(o.margin, 0.35, "--margin", 0, 2, "from 0 to 2");
  if (s.kind == Objective::triplet) s.margin = setting(o.margin, 0.2, "--margin", 0, 1e6, "0 or more");
  if (margin_loss) s.scale = setting(o.scale, 64, "--scale", 1e-6, 1e6, "positive");
  if (s.kind == Objective::triplet) s.mining = o.mining == Mining::automatic ? Mining::batch_hard : o.mining;
  return s;
}

void require_two_classes(const ObjectiveSpec& spec, const std::vector<int64_t>& train_labels) {
  if (!spec.classifier && spec.kind != Objective::triplet) return;
  if (train_labels.empty()) return;
  for (int64_t l : train_labels)
    if (l != train_labels[0]) return;
  throw Error(Exit::data, "--loss",
              spec.name() + " needs two classes or more, but every training row has label " +
                  std::to_string(train_labels[0]) + ": nothing to train");
}

nlohmann::ordered_json eval_json(const EvalMetrics& m) {
  nlohmann::ordered_json j{{"rows", m.rows}, {"queries", m.queries}, {"excluded", m.excluded}};
  auto ci = nlohmann::ordered_json::object();
  for (const auto& x : m.metrics) {
    j[x.key] = x.value;
    if (!std::isnan(x.lo)) ci[x.key] = {x.lo, x.hi};
  }
  if (!ci.empty()) j["ci95"] = ci;
  return j;
}

bool update_best(BestRecord& r, double value, int64_t step) {
  if (!std::isfinite(value) || (r.step >= 0 && !(value > r.value))) {
    ++r.since;
    return false;
  }
  r.value = value;
  r.step = step;
  r.since = 0;
  return true;
}

std::string best_to_json(const BestRecord& r) {
  // No best yet (every evaluation so far was NaN) still carries the patience spent on the way.
  if (r.step < 0) return r.since > 0 ? json_text(nlohmann::json{{"metric", r.metric}, {"since", r.since}}) : "{}";
  return json_text(nlohmann::json{{"metric", r.metric}, {"value", r.value}, {"step", r.step}, {"since", r.since}});
}

BestRecord best_from_json(const std::string& text) {
  BestRecord r;
  auto j = nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, false);
  // A record without a finite value (older versions saved -inf as null) is no record.
  if (j.is_object() && j.contains("step") && j.contains("value") && j["value"].is_number()) {
    r.metric = j.value("metric", "");
    r.value = j.value("value", 0.0);
    r.step = j.value("step", int64_t{-1});
    r.since = j.value("since", int64_t{0});
  } else if (j.is_object() && j.contains("since") && j["since"].is_number_integer()) {
    r.metric = j.value("metric", "");
    r.since = j["since"].get<int64_t>();
  }
  return r;
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

const Choices<Objective>& objective_choices() {
  static const Choices<Objective> c{{Objective::infonce, "infonce"}, {Objective::supcon, "supcon"},
                                    {Objective::softmax, "softmax"}, {Objective::arcface, "arcface"},
                                    {Objective::cosface, "cosface"}, {Objective::triplet, "triplet"}};
  return c;
}

const Choices<Mining>& mining_choices() {
  static const Choices<Mining> c{{Mining::batch_hard, "batch-hard"}, {Mining::semi_hard, "semi-hard"}};
  return c;
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
  if (o.precision != Precision::fp32 && o.dtype != DType::f32)
    throw Error(
        Exit::usage, "--precision",
        std::string(model::precision_choices().name(o.precision)) + " mixes with float32 parameters (--dtype float32)");
  if (!o.labels.empty() && !o.cache.empty() && o.embeddings.empty())
    throw Error(Exit::usage, "--labels",
                "with --cache picks the label column of grouped mode (--embeddings); query/passage pairs have none");
  const bool text = !o.tokenizer.empty() || !o.query_tokenizer.empty() || !o.passage_tokenizer.empty();
  if (text && !o.cache.empty())
    throw Error(Exit::usage, "--tokenizer", "tokenizes raw text (--data); cached embeddings (--cache) need none");
  if (o.max_tokens >= 0 && !o.cache.empty())  // accepted and ignored, it read as if it capped something
    throw Error(Exit::usage, "--max-tokens",
                "caps the chunks of text sides (--data); cached embeddings (--cache) have none");
  if (o.tokenize.max_length < 0) throw Error(Exit::usage, "--max-length", "must be positive");
  if (o.eval_split < 0 || o.eval_split >= 1)
    throw Error(Exit::usage, "--eval-split", "must be a fraction of the rows, above 0 and below 1");
  if (o.eval_end <= 0 && o.eval_split <= 0 && o.eval_data.empty()) {
    const char* needs = "needs an evaluation set (--eval-rows, --eval-split or --eval-data)";
    if (!o.eval_dump.empty()) throw Error(Exit::usage, "--eval-dump", needs);
    if (o.eval_bootstrap > 0) throw Error(Exit::usage, "--eval-bootstrap", needs);
    if (o.eval_every > 0) throw Error(Exit::usage, "--eval-every", needs);
    if (!o.select_best.empty()) throw Error(Exit::usage, "--select-best", needs);
  }
  if (o.early_stop > 0 && o.select_best.empty())
    throw Error(Exit::usage, "--early-stop", "needs --select-best METRIC (the metric whose best it waits for)");
  if (o.early_stop > 0 && o.eval_every <= 0)
    throw Error(Exit::usage, "--early-stop", "needs --eval-every N (evaluations during training)");
  if (!o.eval_data.empty() && (o.eval_end > 0 || o.eval_split > 0))
    throw Error(Exit::usage, "--eval-data", "give one of --eval-data, --eval-rows and --eval-split");
  if (o.resume && o.checkpoint_dir.empty()) throw Error(Exit::usage, "--resume", "needs --checkpoint-dir");
  if (!(o.dist_timeout > 0)) throw Error(Exit::usage, "--dist-timeout", "must be positive");
  validate_data_cache(o);
  o.cache.empty() ? validate_raw_sides(o) : validate_cached_sides(o);
}

bool grouped_mode(const TrainOptions& o) { return o.cache.empty() ? !o.labels.empty() : !o.embeddings.empty(); }

void check_plan(const TrainOptions& o) {
  validate_selection(o, resolve_objective(o, grouped_mode(o)));
  check_split_options(o, grouped_mode(o));
}

void validate_cached_sides(const TrainOptions& o) {
  const bool grouped = !o.embeddings.empty();
  if (grouped == (!o.query_embeddings.empty() || !o.passage_embeddings.empty()))
    throw Error(Exit::usage, "--embeddings",
                "give --embeddings NAME (grouped by labels) or --query-embeddings and --passage-embeddings (aligned)");
  if (!grouped && (o.query_embeddings.empty() || o.passage_embeddings.empty()))
    throw Error(Exit::usage, "--query-embeddings", "aligned mode needs --query-embeddings and --passage-embeddings");
  if (!grouped && o.query_embeddings == o.passage_embeddings)
    throw Error(Exit::usage, "--passage-embeddings",
                "the same embeddings as --query-embeddings ('" + o.query_embeddings +
                    "'): every query would find itself, and the metrics say nothing; with one encoder's "
                    "embeddings, train on rows grouped by label (--embeddings " +
                    o.query_embeddings + "), or cache each side with its own encoder");
}

namespace {

// The width of an encoder's rows as the head sees them (each row flattened).
int64_t flat_width(const io::cache::EmbeddingInfo& e) {
  int64_t w = 1;
  for (std::size_t i = 1; i < e.shape.size(); ++i) w *= e.shape[i];
  return w;
}

}  // namespace

void check_cached_info(const TrainOptions& o, const io::cache::CacheInfo& info, const std::string& path, bool grouped) {
  if (!info.complete) throw Error(Exit::data, path, "incomplete cache");
  // A short /labels or a rows attribute past the datasets failed deep in training ("index out of
  // range in self", 70), or never, when a short run drew no such row: refused before any is read.
  io::cache::require_sound_structure(info, path);
  auto named = [&](const std::string& name) -> const io::cache::EmbeddingInfo& {
    for (const auto& e : info.embeddings)
      if (e.name == name) return e;
    throw Error(Exit::data, path,
                "no encoder named '" + name + "' in the cache (have: " + io::cache::encoder_names(info) + ")");
  };
  if (grouped) {
    if (!info.labels) throw Error(Exit::data, path, "grouped mode needs labels in the cache (cache-fill --labels)");
    io::cache::label_column(info, o.labels, "--labels");  // --labels NAME: one the cache has
    named(o.embeddings);
    return;
  }
  const int64_t q = flat_width(named(o.query_embeddings)), p = flat_width(named(o.passage_embeddings));
  if (q != p)
    throw Error(Exit::data, path,
                "embedding widths differ between sides (" + std::to_string(q) + " vs " + std::to_string(p) +
                    "); one head cannot serve both");
}

void check_cached_files(const TrainOptions& o) {
  if (o.cache.empty()) return;
  const bool grouped = !o.embeddings.empty();
  for (const std::string* path : {&o.cache, &o.eval_data})
    if (!path->empty()) check_cached_info(o, io::cache::read_info(*path, false), *path, grouped);
}

void check_resume_file(const TrainOptions& o) {
  if (!o.resume || o.checkpoint_dir.empty()) return;
  const std::string path = checkpoint_path(o.checkpoint_dir);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) check_checkpoint_digest(path);
}

namespace {

// A side read as text (tokenized with `tokenizer`): one field of --data, and at most one field of
// hard negatives.
void validate_text_side(const TrainOptions& o, const std::vector<std::string>& fields, const char* option,
                        bool negatives) {
  if (fields.size() != 1)
    throw Error(Exit::usage, option, "a text side reads one field, not " + std::to_string(fields.size()));
  if (negatives && o.negatives.size() > 1)
    throw Error(Exit::usage, "--negatives", "a text side reads one field of negatives");
  if (o.data.empty()) throw Error(Exit::usage, "--data", "text fields need --data (a manifest or an HDF5 file)");
}

}  // namespace

void check_raw_columns(const TrainOptions& o) {
  using io::source::Kind;
  const Kind kind = o.data.empty() ? Kind::shm : io::source::kind_of(o.data);
  if ((kind != Kind::hdf5 && kind != Kind::npz) || o.passage.empty() || !o.tokenizer.empty() ||
      !o.query_tokenizer.empty() || !o.passage_tokenizer.empty() || o.data_cache.mode != data_cache::Mode::none)
    return;
  std::vector<std::string> all = o.query;
  all.insert(all.end(), o.passage.begin(), o.passage.end());
  all.insert(all.end(), o.negatives.begin(), o.negatives.end());
  for (const auto& ds : all)
    if (io::source::names_own_file(ds)) return;
  std::vector<int64_t> rows;  // opened as load_raw opens them: the query's, the passages', the negatives'
  for (const auto& ds : all) {
    auto col = io::source::open_column(o.data, ds, o.files, io::source::Role::images);
    io::source::require_numeric_input(col->info(), o.data);
    rows.push_back(col->info().rows());
  }
  // The queries' and passages' rows; load_raw checks each negatives dataset's rows with its shape.
  const std::size_t sides = o.query.size() + o.passage.size();
  for (std::size_t i = 0; i < sides; ++i) same_rows(o.data, o.query[0], rows[0], all[i], rows[i]);
}

std::string side_tokenizer(const TrainOptions& o, bool query) {
  const std::string& own = query ? o.query_tokenizer : o.passage_tokenizer;
  return own.empty() ? o.tokenizer : own;
}

void validate_raw_sides(const TrainOptions& o) {
  const bool grouped = !o.labels.empty();
  if (o.query.empty() || (o.passage.empty() && !grouped))
    throw Error(Exit::usage, "--query", "raw mode needs --query and --passage datasets (or --query and --labels)");
  if (grouped && !o.passage.empty())
    throw Error(Exit::usage, "--labels", "raw grouped mode trains one side: give --query and no --passage");
  if (grouped && !o.negatives.empty())
    throw Error(Exit::usage, "--negatives", "raw grouped mode has no passages: the other labels are the negatives");
  if (grouped && o.encoder.empty())
    throw Error(Exit::usage, "--encoder", "raw grouped mode trains one encoder: give --encoder");
  const bool query_text = !side_tokenizer(o, true).empty();
  const bool passage_text = !o.passage.empty() && !side_tokenizer(o, false).empty();
  if (query_text) validate_text_side(o, o.query, "--query", false);
  if (passage_text) validate_text_side(o, o.passage, "--passage", true);
  if (!passage_text && !o.negatives.empty() && o.negatives.size() != o.passage.size())
    throw Error(Exit::usage, "--negatives", "give one negatives dataset per passage dataset");
  const bool tied = !o.encoder.empty();
  if (tied == (!o.query_encoder.empty() || !o.passage_encoder.empty()))
    throw Error(Exit::usage, "--encoder", "give --encoder (tied) or both --query-encoder and --passage-encoder");
  if (!tied && (o.query_encoder.empty() || o.passage_encoder.empty()))
    throw Error(Exit::usage, "--query-encoder", "separate encoders need both --query-encoder and --passage-encoder");
  if (!tied && !o.out.empty() && o.passage_out.empty())
    throw Error(Exit::usage, "--passage-out", "separate encoders need --passage-out as well as --out");
}

void validate_selection(const TrainOptions& o, const ObjectiveSpec& spec) {
  if (o.select_best.empty()) return;
  const bool grouped = grouped_mode(o);
  const auto keys = metric_keys(grouped, o.eval_k, spec.classifier);
  if (std::find(keys.begin(), keys.end(), o.select_best) != keys.end()) return;
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
  throw Error(Exit::usage, "--select-best", "'" + o.select_best + "' is not a metric of this mode (" + list + ")");
}

void validate_data_cache(const TrainOptions& o) {
  const auto mode = o.data_cache.mode;
  if (o.data_cache.limit_bytes > 0 && mode != data_cache::Mode::stochastic)
    throw Error(Exit::usage, "--data-cache-limit", "needs --data-cache stochastic:F (the limit replaces F)");
  if (mode == data_cache::Mode::none) {
    if (!o.data_cache.keep.empty())
      throw Error(Exit::usage, "--data-cache-keep", "needs --data-cache full or stochastic:F");
    return;
  }
  if (!o.cache.empty())
    throw Error(Exit::usage, "--data-cache",
                "caches raw inputs; cached embeddings are shared between processes with --cache-shm");
  if (mode == data_cache::Mode::smart && !o.data_cache.keep.empty())
    throw Error(Exit::usage, "--data-cache-keep",
                "needs --data-cache full or stochastic:F (a SmartCache window holds one run's rows)");
}

}  // namespace traincache::train
