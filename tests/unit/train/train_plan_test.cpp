#include "traincache/train/train_plan.h"

#include <cmath>
#include <functional>

#include "catch.h"
#include "test_util.h"
#include "traincache/base/error.h"
#include "traincache/train/dist_launch.h"

using namespace traincache;
using test::code_of;

CATCH_TEST_CASE("train plan: held-out rows are excluded from training", "[train]") {
  train::TrainOptions o;
  o.eval_begin = 8;
  o.eval_end = 12;
  auto s = train::split_rows(o, 10);  // the range is clipped to the data
  CATCH_CHECK(s.eval == std::vector<int64_t>{8, 9});
  CATCH_CHECK(s.train == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CATCH_CHECK(s.eval_end == 10);
  train::TrainOptions none;
  CATCH_CHECK(train::split_rows(none, 3).train.size() == 3);
  CATCH_CHECK(train::split_rows(none, 3).eval.empty());
  o.eval_begin = 0;
  o.eval_end = INT64_MAX;  // --eval-rows 0: leaves nothing to train on
  CATCH_CHECK(code_of([&] { train::split_rows(o, 10); }) == Exit::usage);
  o.eval_begin = 20;
  o.eval_end = 30;
  CATCH_CHECK(code_of([&] { train::split_rows(o, 10); }) == Exit::usage);
}

CATCH_TEST_CASE("train plan: steps per epoch drop or keep the last partial batch", "[train]") {
  train::TrainOptions o;
  o.batch_size = 64;
  o.epochs = 3;
  auto p = train::plan_steps(o, 300);
  CATCH_CHECK(p.per_epoch == 4);
  CATCH_CHECK(p.total == 12);
  o.drop_last = false;
  CATCH_CHECK(train::plan_steps(o, 300).per_epoch == 5);
  o.steps = 7;
  CATCH_CHECK(train::plan_steps(o, 300).total == 7);
  o.drop_last = true;
  o.batch_size = 301;
  CATCH_CHECK(code_of([&] { train::plan_steps(o, 300); }) == Exit::usage);
}

CATCH_TEST_CASE("train plan: learning-rate schedules", "[train]") {
  train::TrainOptions o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  // Warmup: (s + 1) / W, then constant.
  CATCH_CHECK(train::scheduled_lr(o, 0, 10) == Approx(0.25));
  CATCH_CHECK(train::scheduled_lr(o, 3, 10) == Approx(1.0));
  CATCH_CHECK(train::scheduled_lr(o, 9, 10) == Approx(1.0));
  o.schedule = train::Schedule::linear;  // 1 - (s - W) / (T - W)
  CATCH_CHECK(train::scheduled_lr(o, 4, 10) == Approx(1.0));
  CATCH_CHECK(train::scheduled_lr(o, 7, 10) == Approx(0.5));
  o.schedule = train::Schedule::cosine;  // (1 + cos(pi t)) / 2
  CATCH_CHECK(train::scheduled_lr(o, 7, 10) == Approx(0.5));
  CATCH_CHECK(train::scheduled_lr(o, 10, 10) == Approx(0.0).margin(1e-12));
}

CATCH_TEST_CASE("train plan: option checks", "[train]") {
  train::TrainOptions o;
  o.cache = "c.h5";
  o.embeddings = "e";
  CATCH_CHECK(code_of([&] { train::validate_options(o); }) == Exit::ok);
  o.data = "d.h5";  // both
  CATCH_CHECK(test::message_of([&] { train::validate_options(o); }) ==
              "--data: give exactly one of --data (raw inputs) and --cache (embeddings)");
  train::TrainOptions neither;
  neither.query = {"q"};
  neither.passage = {"p"};
  neither.encoder = "m.pt";
  CATCH_CHECK(test::message_of([&] { train::validate_options(neither); }) ==
              "--data: give exactly one of --data (raw inputs) and --cache (embeddings)");
  o.cache.clear();
  // --dtype is an enum from parsing on: float16 is refused there, with the valid names.
  CATCH_CHECK(code_of([&] { train::float_dtype_choices().parse("float16", "--dtype"); }) == Exit::usage);
  CATCH_CHECK(train::float_dtype_choices().parse("float64", "--dtype") == DType::f64);
  o.temperature = 0;
  CATCH_CHECK(code_of([&] { train::validate_options(o); }) == Exit::usage);
  train::TrainOptions slabs;  // raw datasets all in slabs need no --data
  slabs.query = {"shm:q"};
  slabs.passage = {"shm:p"};
  slabs.encoder = "m.pt";
  CATCH_CHECK(code_of([&] { train::validate_options(slabs); }) == Exit::ok);
}

namespace {

// Valid options of each mode, to break one rule at a time.
train::TrainOptions raw_pairs() {
  train::TrainOptions o;
  o.data = "d.h5";
  o.query = {"q"};
  o.passage = {"p"};
  o.encoder = "m.pt";
  return o;
}
train::TrainOptions cached_aligned() {
  train::TrainOptions o;
  o.cache = "c.h5";
  o.query_embeddings = "q";
  o.passage_embeddings = "p";
  return o;
}
std::string refusal(const train::TrainOptions& o) {
  return test::message_of([&] { train::validate_options(o); });
}

// validate_options' refusal of raw_pairs() or cached_aligned() after `change` ("" if none).
std::string raw(const std::function<void(train::TrainOptions&)>& change) {
  auto o = raw_pairs();
  change(o);
  return refusal(o);
}
std::string cached(const std::function<void(train::TrainOptions&)>& change) {
  auto o = cached_aligned();
  change(o);
  return refusal(o);
}

}  // namespace

// Every rule of the datasets and modules of a mode, checked before anything is loaded; each
// message as gc-train prints it after "gc-train: error: ".
CATCH_TEST_CASE("train plan: the raw mode's datasets and encoders", "[train]") {
  CATCH_CHECK(refusal(raw_pairs()).empty());
  CATCH_CHECK(refusal(cached_aligned()).empty());
  // One encoder's embeddings on both sides: every query finds itself (issue 43, item 5).
  CATCH_CHECK(cached([](auto& o) { o.passage_embeddings = "q"; }) ==
              "--passage-embeddings: the same embeddings as --query-embeddings ('q'): every query would find itself, "
              "and the metrics say nothing; with one encoder's embeddings, train on rows grouped by label "
              "(--embeddings q), or cache each side with its own encoder");
  CATCH_CHECK(raw([](auto& o) { o.passage.clear(); }) ==
              "--query: raw mode needs --query and --passage datasets (or --query and --labels)");
  CATCH_CHECK(raw([](auto& o) { o.labels = "y"; }) ==
              "--labels: raw grouped mode trains one side: give --query and no --passage");
  CATCH_CHECK(raw([](auto& o) {
                o.labels = "y";
                o.passage.clear();
                o.negatives = {"n"};
              }) == "--negatives: raw grouped mode has no passages: the other labels are the negatives");
  CATCH_CHECK(raw([](auto& o) {
                o.labels = "y";
                o.passage.clear();
                o.encoder.clear();
                o.query_encoder = "q.pt";
                o.passage_encoder = "p.pt";
              }) == "--encoder: raw grouped mode trains one encoder: give --encoder");
  CATCH_CHECK(raw([](auto& o) {
                o.labels = "y";
                o.passage.clear();
              }).empty());
  CATCH_CHECK(raw([](auto& o) { o.query_encoder = "q.pt"; }) ==
              "--encoder: give --encoder (tied) or both --query-encoder and --passage-encoder");
  CATCH_CHECK(raw([](auto& o) { o.encoder.clear(); }) ==
              "--encoder: give --encoder (tied) or both --query-encoder and --passage-encoder");
  CATCH_CHECK(raw([](auto& o) {
                o.encoder.clear();
                o.passage_encoder = "p.pt";
              }) == "--query-encoder: separate encoders need both --query-encoder and --passage-encoder");
  auto separate = [](train::TrainOptions& o) {
    o.encoder.clear();
    o.query_encoder = "q.pt";
    o.passage_encoder = "p.pt";
  };
  CATCH_CHECK(raw(separate).empty());
  CATCH_CHECK(raw([&](auto& o) {
                separate(o);
                o.out = "q-out.pt";
              }) == "--passage-out: separate encoders need --passage-out as well as --out");
  CATCH_CHECK(raw([&](auto& o) {
                separate(o);
                o.out = "q-out.pt";
                o.passage_out = "p-out.pt";
              }).empty());
  CATCH_CHECK(raw([](auto& o) {
                o.negatives = {"n1", "n2"};
              }) == "--negatives: give one negatives dataset per passage dataset");
  CATCH_CHECK(raw([](auto& o) { o.negatives = {"n1"}; }).empty());
}

CATCH_TEST_CASE("train plan: the raw mode's text sides", "[train]") {
  // One field of --data each, at most one field of negatives.
  CATCH_CHECK(raw([](auto& o) {
                o.tokenizer = "tok.json";
                o.query = {"a", "b"};
              }) == "--query: a text side reads one field, not 2");
  CATCH_CHECK(raw([](auto& o) {
                o.passage_tokenizer = "tok.json";
                o.passage = {"a", "b"};
              }) == "--passage: a text side reads one field, not 2");
  CATCH_CHECK(raw([](auto& o) {
                o.query_tokenizer = "tok.json";
                o.query = {"a", "b"};
                o.passage = {"p1", "p2"};  // a numeric side may read several
              }) == "--query: a text side reads one field, not 2");
  CATCH_CHECK(raw([](auto& o) {
                o.tokenizer = "tok.json";
                o.negatives = {"n1", "n2"};
              }) == "--negatives: a text side reads one field of negatives");
  CATCH_CHECK(raw([](auto& o) {
                o.tokenizer = "tok.json";
                o.data.clear();
                o.query = {"shm:q"};
                o.passage = {"shm:p"};
              }) == "--data: text fields need --data (a manifest or an HDF5 file)");
}

CATCH_TEST_CASE("train plan: the cached mode's embeddings", "[train]") {
  CATCH_CHECK(cached([](auto& o) { o.embeddings = "e"; }) ==
              "--embeddings: give --embeddings NAME (grouped by labels) or --query-embeddings and "
              "--passage-embeddings (aligned)");
  CATCH_CHECK(cached([](auto& o) {
                o.query_embeddings.clear();
                o.passage_embeddings.clear();
              }) ==
              "--embeddings: give --embeddings NAME (grouped by labels) or --query-embeddings and "
              "--passage-embeddings (aligned)");
  CATCH_CHECK(cached([](auto& o) { o.passage_embeddings.clear(); }) ==
              "--query-embeddings: aligned mode needs --query-embeddings and --passage-embeddings");
  CATCH_CHECK(cached([](auto& o) {
                o.query_embeddings.clear();
                o.passage_embeddings.clear();
                o.embeddings = "e";
              }).empty());
}

CATCH_TEST_CASE("train plan: evaluation, checkpoints and the launch, in either mode", "[train]") {
  CATCH_CHECK(cached([](auto& o) {
                o.eval_data = "e.h5";
                o.eval_split = 0.1;
              }) == "--eval-data: give one of --eval-data, --eval-rows and --eval-split");
  CATCH_CHECK(raw([](auto& o) {
                o.eval_data = "e.h5";
                o.eval_end = 10;
              }) == "--eval-data: give one of --eval-data, --eval-rows and --eval-split");
  CATCH_CHECK(cached([](auto& o) { o.eval_data = "e.h5"; }).empty());
  CATCH_CHECK(cached([](auto& o) { o.resume = true; }) == "--resume: needs --checkpoint-dir");
  CATCH_CHECK(cached([](auto& o) {
                o.resume = true;
                o.checkpoint_dir = "ck";
              }).empty());
  CATCH_CHECK(cached([](auto& o) { o.dist_timeout = 0; }) == "--dist-timeout: must be positive");
  CATCH_CHECK(cached([](auto& o) { o.dist_timeout = -1; }) == "--dist-timeout: must be positive");
  const std::string needs = ": needs an evaluation set (--eval-rows, --eval-split or --eval-data)";
  CATCH_CHECK(cached([](auto& o) { o.eval_dump = "x.tsv"; }) == "--eval-dump" + needs);
  CATCH_CHECK(cached([](auto& o) { o.eval_bootstrap = 100; }) == "--eval-bootstrap" + needs);
  CATCH_CHECK(cached([](auto& o) { o.eval_every = 2; }) == "--eval-every" + needs);
  CATCH_CHECK(cached([](auto& o) { o.select_best = "mrr_at_10"; }) == "--select-best" + needs);
  CATCH_CHECK(cached([](auto& o) {
                o.eval_dump = "x.tsv";
                o.eval_end = 10;
              }).empty());
  CATCH_CHECK(cached([](auto& o) {
                o.eval_split = 0.2;
                o.early_stop = 2;
              }) == "--early-stop: needs --select-best METRIC (the metric whose best it waits for)");
  CATCH_CHECK(cached([](auto& o) {
                o.eval_split = 0.2;
                o.select_best = "mrr_at_10";
                o.early_stop = 2;
              }) == "--early-stop: needs --eval-every N (evaluations during training)");
  CATCH_CHECK(cached([](auto& o) {
                o.eval_split = 0.2;
                o.select_best = "mrr_at_10";
                o.early_stop = 2;
                o.eval_every = 5;
              }).empty());
  for (double f : {1.5, 1.0, -0.1})
    CATCH_CHECK(cached([f](auto& o) { o.eval_split = f; }) ==
                "--eval-split: must be a fraction of the rows, above 0 and below 1");
}

CATCH_TEST_CASE("train plan: --select-best names a metric of the mode and objective", "[train]") {
  auto selection = [](const train::TrainOptions& o, bool labelled) {
    return test::message_of([&] { train::validate_selection(o, train::resolve_objective(o, labelled)); });
  };
  auto o = cached_aligned();
  o.select_best = "mrr_at_10";
  CATCH_CHECK(selection(o, false).empty());
  o.select_best = "r_precision";  // a metric of grouped mode
  CATCH_CHECK(selection(o, false) ==
              "--select-best: 'r_precision' is not a metric of this mode (accuracy_at_1, accuracy_at_5, "
              "accuracy_at_10, precision_at_1, precision_at_5, precision_at_10, recall_at_1, recall_at_5, "
              "recall_at_10, mrr_at_10, ndcg_at_10, map_at_100)");
  train::TrainOptions grouped;
  grouped.cache = "c.h5";
  grouped.embeddings = "e";
  grouped.eval_k = {1, 3};
  grouped.select_best = "r_precision";
  CATCH_CHECK(selection(grouped, true).empty());
  grouped.select_best = "accuracy_at_1";  // a classifier's metric
  CATCH_CHECK(selection(grouped, true) ==
              "--select-best: 'accuracy_at_1' is not a metric of this mode (precision_at_1, precision_at_3, "
              "r_precision, map_at_r)");
  grouped.loss = train::Objective::softmax;
  CATCH_CHECK(selection(grouped, true).empty());
}

CATCH_TEST_CASE("train plan: --eval-split holds out a seeded random fraction", "[train]") {
  train::TrainOptions o;
  o.eval_split = 0.25;
  o.seed = 3;
  auto s = train::split_rows(o, 100);
  CATCH_CHECK(s.eval.size() == 25);
  CATCH_CHECK(s.train.size() == 75);
  CATCH_CHECK(std::is_sorted(s.eval.begin(), s.eval.end()));
  std::vector<int64_t> all = s.train;
  all.insert(all.end(), s.eval.begin(), s.eval.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 100; ++i) CATCH_CHECK(all[static_cast<std::size_t>(i)] == i);
  CATCH_CHECK(train::split_rows(o, 100).eval == s.eval);  // the seed decides
  CATCH_CHECK(s.eval.back() - s.eval.front() > 50);       // spread over the rows, not a block
  o.seed = 4;
  CATCH_CHECK(train::split_rows(o, 100).eval != s.eval);
  o.eval_split = 0.001;  // rounds to no rows
  CATCH_CHECK(test::message_of([&] { train::split_rows(o, 100); }) ==
              "--eval-split: holds out no rows of the data's 100 (use a larger fraction)");
  o.eval_split = 0.999;
  CATCH_CHECK(code_of([&] { train::split_rows(o, 100); }) == Exit::usage);
  o.eval_split = 0.5;
  o.eval_end = 10;
  CATCH_CHECK(test::message_of([&] { train::split_rows(o, 100); }) ==
              "--eval-split: give --eval-split or --eval-rows, not both");
}

CATCH_TEST_CASE("train plan: --stratify holds out every class in proportion", "[train]") {
  // Rows sorted by class, as an image folder lists them: 60 of class 0, 30 of 1, 9 of 2, 1 of 3.
  std::vector<int64_t> labels;
  for (auto [label, n] : std::vector<std::pair<int64_t, int>>{{0, 60}, {1, 30}, {2, 9}, {3, 1}})
    labels.insert(labels.end(), static_cast<std::size_t>(n), label);
  train::TrainOptions o;
  o.eval_split = 0.2;
  o.stratify = true;
  auto s = train::split_rows(o, 100, &labels);
  std::map<int64_t, int> held;
  for (auto r : s.eval) ++held[labels[static_cast<std::size_t>(r)]];
  CATCH_CHECK(held == std::map<int64_t, int>{{0, 12}, {1, 6}, {2, 2}});  // round(0.2 n); a lone row trains
  CATCH_CHECK(s.train.size() + s.eval.size() == 100);
  CATCH_CHECK(train::label_balance_warnings(
                  [&] {
                    std::vector<int64_t> l;
                    for (auto r : s.train) l.push_back(labels[static_cast<std::size_t>(r)]);
                    return l;
                  }(),
                  [&] {
                    std::vector<int64_t> l;
                    for (auto r : s.eval) l.push_back(labels[static_cast<std::size_t>(r)]);
                    return l;
                  }())
                  .size() == 1);  // class 3 is in training only
  o.eval_split = 0.01;            // each class of two or more still gives one row
  held.clear();
  for (auto r : train::split_rows(o, 100, &labels).eval) ++held[labels[static_cast<std::size_t>(r)]];
  CATCH_CHECK(held == std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}});
  CATCH_CHECK(test::message_of([&] { train::split_rows(o, 100); }) ==
              "--stratify: needs labels: grouped mode (--cache with --embeddings)");
  o.eval_split = 0;
  CATCH_CHECK(test::message_of([&] { train::split_rows(o, 100, &labels); }) == "--stratify: applies to --eval-split");
}

CATCH_TEST_CASE("train plan: an evaluation set unlike the training set is named", "[train]") {
  // --eval-rows 1600: of a folder sorted by class: two classes held out, eight trained on.
  std::vector<int64_t> train_l, eval_l;
  for (int64_t c = 0; c < 8; ++c) train_l.insert(train_l.end(), 200, c);
  for (int64_t c = 8; c < 10; ++c) eval_l.insert(eval_l.end(), 200, c);
  auto w = train::label_balance_warnings(train_l, eval_l);
  CATCH_REQUIRE(w.size() == 2);
  CATCH_CHECK(w[0] ==
              "the evaluation rows lack 8 of the 8 classes of the training rows (0, 1, 2, 3, 4, 5, 6, 7); "
              "--eval-split F --stratify holds out every class");
  CATCH_CHECK(w[1] ==
              "the evaluation rows' label distribution differs from the training rows' (total variation "
              "distance 1.00; 400 rows drawn at random would differ by about 0.05)");
  // Alike: same classes, shares within 0.2 in total variation.
  std::vector<int64_t> a{0, 0, 1, 1, 2, 2}, b{0, 1, 2, 2};
  CATCH_CHECK(train::label_balance_warnings(a, b).empty());
  // Skewed: 70/15/15 against thirds, 100 rows (sampling explains about 0.06); 9 rows so skewed
  // are within what sampling gives (about 0.19, times 3).
  std::vector<int64_t> skewed(70, 0);
  skewed.insert(skewed.end(), 15, 1);
  skewed.insert(skewed.end(), 15, 2);
  CATCH_CHECK(train::label_balance_warnings(a, skewed).size() == 1);
  std::vector<int64_t> few{0, 0, 0, 0, 0, 0, 0, 1, 2};
  CATCH_CHECK(train::label_balance_warnings(a, few).empty());
}

CATCH_TEST_CASE("train plan: the best record needs a strictly better value, and patience counts evaluations",
                "[train]") {
  train::BestRecord r;
  r.metric = "map_at_r";
  CATCH_CHECK(train::update_best(r, 0.2, 0));         // the first evaluation is the best so far
  CATCH_CHECK_FALSE(train::update_best(r, 0.2, 10));  // equal is not better: the earlier step stays
  CATCH_CHECK(r.step == 0);
  CATCH_CHECK(r.since == 1);
  CATCH_CHECK_FALSE(train::patience_exhausted(r, 2));
  CATCH_CHECK_FALSE(train::update_best(r, 0.1, 20));
  CATCH_CHECK(train::patience_exhausted(r, 2));
  CATCH_CHECK_FALSE(train::patience_exhausted(r, 0));  // 0: never stop
  CATCH_CHECK(train::update_best(r, 0.3, 30));
  CATCH_CHECK(r.since == 0);
  auto back = train::best_from_json(train::best_to_json(r));
  CATCH_CHECK(back.metric == "map_at_r");
  CATCH_CHECK(back.value == 0.3);
  CATCH_CHECK(back.step == 30);
  CATCH_CHECK(train::best_from_json("{}").step == -1);
  // A metric without queries (-inf, NaN) is never a best; a record saved with a null value is none.
  train::BestRecord none;
  CATCH_CHECK_FALSE(train::update_best(none, -INFINITY, 0));
  CATCH_CHECK_FALSE(train::update_best(none, NAN, 10));
  CATCH_CHECK(none.step == -1);
  CATCH_CHECK(train::best_to_json(train::BestRecord{}) == "{}");
  // The patience spent before any best survives a resume (issue 43, item 7: it was saved as {}).
  none.metric = "map_at_r";
  const auto resumed = train::best_from_json(train::best_to_json(none));
  CATCH_CHECK(resumed.step == -1);
  CATCH_CHECK(resumed.since == 2);
  CATCH_CHECK(resumed.metric == "map_at_r");
  CATCH_CHECK(train::best_from_json(R"({"metric":"recall_at_1","value":null,"step":0,"since":3})").step == -1);
  CATCH_CHECK(train::best_to_json(train::BestRecord{}) == "{}");
}

CATCH_TEST_CASE("train plan: metric keys per mode, and an evaluation as JSON", "[train]") {
  CATCH_CHECK(train::metric_keys(true, {1, 5}) ==
              std::vector<std::string>{"precision_at_1", "precision_at_5", "r_precision", "map_at_r"});
  CATCH_CHECK(train::metric_keys(false, {3}) == std::vector<std::string>{"accuracy_at_3", "precision_at_3",
                                                                         "recall_at_3", "mrr_at_10", "ndcg_at_10",
                                                                         "map_at_100"});
  train::EvalMetrics m;
  m.present = true;
  m.rows = 4;
  m.queries = 3;
  m.excluded = 1;
  m.metrics.push_back({"r_precision", "R-precision", 0.5});
  CATCH_CHECK(train::eval_json(m).dump() == R"({"rows":4,"queries":3,"excluded":1,"r_precision":0.5})");
  m.metrics.push_back({"map_at_r", "MAP@R", 0.25, 0.125, 0.5});
  CATCH_CHECK(
      train::eval_json(m).dump() ==
      R"({"rows":4,"queries":3,"excluded":1,"r_precision":0.5,"map_at_r":0.25,"ci95":{"map_at_r":[0.125,0.5]}})");
}

CATCH_TEST_CASE("train plan: the objective, its defaults and the options that do not apply", "[train]") {
  using train::Objective;
  train::TrainOptions o;
  CATCH_CHECK(train::resolve_objective(o, false).name() == "infonce");
  CATCH_CHECK(train::resolve_objective(o, true).name() == "supcon");
  o.symmetric = true;
  CATCH_CHECK(train::resolve_objective(o, false).name() == "symmetric");
  CATCH_CHECK(test::message_of([&] { train::resolve_objective(o, true); }) == "--symmetric: applies to infonce only");
  o.symmetric = false;
  o.loss = Objective::arcface;
  auto s = train::resolve_objective(o, true);
  CATCH_CHECK(s.classifier);
  CATCH_CHECK(s.margin == 0.5);
  CATCH_CHECK(s.scale == 64);
  CATCH_CHECK(code_of([&] { train::resolve_objective(o, false); }) == Exit::usage);  // needs labels
  o.loss = Objective::cosface;
  o.margin = 0.2;
  o.scale = 30;
  s = train::resolve_objective(o, true);
  CATCH_CHECK((s.margin == 0.2 && s.scale == 30));
  o.margin = 3;
  CATCH_CHECK(test::message_of([&] { train::resolve_objective(o, true); }) == "--margin: must be from 0 to 2");
  o.loss = Objective::triplet;
  o.margin = std::nan("");
  CATCH_CHECK(test::message_of([&] { train::resolve_objective(o, true); }) ==
              "--scale: applies to arcface and cosface, not triplet");
  o.scale = std::nan("");
  s = train::resolve_objective(o, true);
  CATCH_CHECK((s.margin == 0.2 && s.mining == train::Mining::batch_hard && !s.classifier));
  o.classifier_out = "c.pt";
  CATCH_CHECK(code_of([&] { train::resolve_objective(o, true); }) == Exit::usage);
  o.classifier_out.clear();
  o.loss = Objective::softmax;
  o.margin = 0.1;
  CATCH_CHECK(test::message_of([&] { train::resolve_objective(o, true); }) ==
              "--margin: applies to arcface, cosface and triplet, not softmax");
  o.margin = std::nan("");
  o.mining = train::Mining::semi_hard;
  CATCH_CHECK(test::message_of([&] { train::resolve_objective(o, true); }) ==
              "--mining: applies to triplet, not softmax");
  o.loss = Objective::infonce;
  o.mining = train::Mining::automatic;
  CATCH_CHECK(code_of([&] { train::resolve_objective(o, true); }) == Exit::usage);
  CATCH_CHECK(train::metric_keys(true, {1, 5}, true) == std::vector<std::string>{"precision_at_1", "precision_at_5",
                                                                                 "r_precision", "map_at_r",
                                                                                 "accuracy_at_1", "accuracy_at_5"});
}

// The objective's refusals as gc-train prints them (cli.gc_train_objectives runs one through the tool).
CATCH_TEST_CASE("train plan: the objective's refusals, message by message", "[train]") {
  using train::Objective;
  auto refused = [](const std::function<void(train::TrainOptions&)>& change, bool labelled) {
    train::TrainOptions o;
    change(o);
    return test::message_of([&] { train::resolve_objective(o, labelled); });
  };
  CATCH_CHECK(refused([](auto& o) { o.loss = Objective::infonce; }, true) ==
              "--loss: infonce trains on pairs (--query and --passage, or --query-embeddings and "
              "--passage-embeddings); labelled rows train with supcon, softmax, arcface, cosface or triplet");
  CATCH_CHECK(refused([](auto& o) { o.loss = Objective::softmax; }, false) ==
              "--loss: softmax trains on labelled rows (--cache with --embeddings, or raw --query with --labels)");
  CATCH_CHECK(refused([](auto& o) { o.margin = 0.1; }, true) ==
              "--margin: applies to arcface, cosface and triplet, not supcon");
  CATCH_CHECK(refused(
                  [](auto& o) {
                    o.loss = Objective::triplet;
                    o.scale = 16;
                  },
                  true) == "--scale: applies to arcface and cosface, not triplet");
  CATCH_CHECK(refused(
                  [](auto& o) {
                    o.loss = Objective::softmax;
                    o.mining = train::Mining::semi_hard;
                  },
                  true) == "--mining: applies to triplet, not softmax");
  CATCH_CHECK(refused(
                  [](auto& o) {
                    o.loss = Objective::arcface;
                    o.margin = 2;
                  },
                  true) == "--margin: must be an angle in radians from 0 to pi/2");
  CATCH_CHECK(refused(
                  [](auto& o) {
                    o.loss = Objective::triplet;
                    o.classifier_out = "x.pt";
                  },
                  true) == "--classifier-out: needs a loss with a classifier (softmax, arcface or cosface)");
  CATCH_CHECK(refused([](auto& o) { o.symmetric = true; }, true) == "--symmetric: applies to infonce only");
  CATCH_CHECK(refused(
                  [](auto& o) {
                    o.loss = Objective::softmax;
                    o.classifier_out = "x.pt";
                  },
                  true)
                  .empty());
  train::TrainOptions labels_of_cache = cached_aligned();
  labels_of_cache.labels = "labels";
  CATCH_CHECK(refusal(labels_of_cache) ==
              "--labels: with --cache picks the label column of grouped mode (--embeddings); query/passage pairs "
              "have none");
}

CATCH_TEST_CASE("train plan: losses that need two classes refuse training rows of one", "[train]") {
  train::TrainOptions o;
  o.loss = train::Objective::softmax;
  const auto softmax = train::resolve_objective(o, true);
  o.loss = train::Objective::triplet;
  const auto triplet = train::resolve_objective(o, true);
  o.loss = train::Objective::automatic;
  const auto supcon = train::resolve_objective(o, true);
  const std::vector<int64_t> one{3, 3, 3}, two{3, 3, 4};
  CATCH_CHECK(code_of([&] { train::require_two_classes(softmax, one); }) == Exit::data);
  CATCH_CHECK(test::message_of([&] { train::require_two_classes(triplet, one); }) ==
              "--loss: triplet needs two classes or more, but every training row has label 3: nothing to train");
  CATCH_CHECK_NOTHROW(train::require_two_classes(softmax, two));
  CATCH_CHECK_NOTHROW(train::require_two_classes(triplet, two));
  CATCH_CHECK_NOTHROW(train::require_two_classes(supcon, one));  // SupCon still pulls one class together
}

CATCH_TEST_CASE("launch: a bare cuda is the process's own GPU, and its share of the cores", "[train]") {
  train::Launch one, ranks;
  ranks.rank = 3;
  ranks.world_size = 4;
  ranks.local_rank = 1;
  ranks.local_world_size = 2;
  CATCH_CHECK(train::local_device("cuda", ranks) == "cuda:1");
  CATCH_CHECK(train::local_device("cuda:0", ranks) == "cuda:0");
  CATCH_CHECK(train::local_device("cpu", ranks) == "cpu");
  CATCH_CHECK(train::local_device("cuda", one) == "cuda");
  CATCH_CHECK(train::local_threads(0, ranks, 16) == 8);
  CATCH_CHECK(train::local_threads(3, ranks, 16) == 3);
  CATCH_CHECK(train::local_threads(0, one, 16) == 0);
  ranks.local_world_size = 32;
  CATCH_CHECK(train::local_threads(0, ranks, 16) == 1);
}
