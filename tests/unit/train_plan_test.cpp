#include "traincache/train_plan.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "test_util.h"
#include "traincache/error.h"

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
  CATCH_CHECK(code_of([&] { train::validate_options(o); }) == Exit::ok);
  o.data = "d.h5";  // both
  CATCH_CHECK(code_of([&] { train::validate_options(o); }) == Exit::usage);
  o.cache.clear();
  // --dtype is an enum from parsing on: float16 is refused there, with the valid names.
  CATCH_CHECK(code_of([&] { train::float_dtype_choices().parse("float16", "--dtype"); }) == Exit::usage);
  CATCH_CHECK(train::float_dtype_choices().parse("float64", "--dtype") == DType::f64);
  o.temperature = 0;
  CATCH_CHECK(code_of([&] { train::validate_options(o); }) == Exit::usage);
  train::TrainOptions slabs;  // raw datasets all in slabs need no --data
  slabs.query = {"shm:q"};
  slabs.passage = {"shm:p"};
  CATCH_CHECK(code_of([&] { train::validate_options(slabs); }) == Exit::ok);
}
