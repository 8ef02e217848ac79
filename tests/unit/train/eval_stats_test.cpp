#include "traincache/train/eval_stats.h"

#include <cmath>

#include "catch.h"
#include "test_util.h"
#include "traincache/base/splitmix.h"

using namespace traincache;
using test::code_of;

CATCH_TEST_CASE("eval stats: retrieval metrics of one relevant passage follow from its rank", "[eval]") {
  train::QueryTable t;
  const std::vector<int64_t> ks{1, 5};
  train::add_retrieval_row(t, ks, 7, 0);     // first
  train::add_retrieval_row(t, ks, 8, 2);     // third
  train::add_retrieval_row(t, ks, 9, 40);    // beyond 10, within 100
  train::add_retrieval_row(t, ks, 10, 150);  // beyond 100
  auto m = train::summarise(t, 0, 0);
  std::vector<std::string> keys;
  for (const auto& x : m) keys.push_back(x.key);
  CATCH_CHECK(keys == std::vector<std::string>{"accuracy_at_1", "accuracy_at_5", "precision_at_1", "precision_at_5",
                                               "recall_at_1", "recall_at_5", "mrr_at_10", "ndcg_at_10", "map_at_100"});
  auto value = [&](const std::string& k) {
    for (const auto& x : m)
      if (x.key == k) return x.value;
    return std::nan("");
  };
  CATCH_CHECK(value("accuracy_at_1") == 0.25);
  CATCH_CHECK(value("accuracy_at_5") == 0.5);
  CATCH_CHECK(value("precision_at_5") == 0.5 / 5);
  CATCH_CHECK(value("recall_at_5") == 0.5);
  CATCH_CHECK(value("mrr_at_10") == Approx((1.0 + 1.0 / 3) / 4));
  CATCH_CHECK(value("ndcg_at_10") == Approx((1.0 + 0.5) / 4));  // 1/log2(2) and 1/log2(4)
  CATCH_CHECK(value("map_at_100") == Approx((1.0 + 1.0 / 3 + 1.0 / 41) / 4));
  CATCH_CHECK(std::isnan(m[0].lo));
  CATCH_CHECK(t.extra_keys == std::vector<std::string>{"rank", "reciprocal_rank"});
  CATCH_CHECK(t.extra[0] == std::vector<double>{1, 3, 41, 151});
  auto tsv = train::dump_tsv(t, 12, true);
  CATCH_CHECK(tsv.substr(0, tsv.find('\n')) ==
              "step\trow\trank\treciprocal_rank\taccuracy_at_1\taccuracy_at_5\tprecision_at_1\tprecision_at_5\t"
              "recall_at_1\trecall_at_5\tmrr_at_10\tndcg_at_10\tmap_at_100");
  CATCH_CHECK(tsv.find("\n12\t8\t3\t0.3333333333\t0\t1\t0\t0.2\t0\t1\t0.3333333333\t0.5\t0.3333333333\n") !=
              std::string::npos);
}

CATCH_TEST_CASE("eval stats: quantiles interpolate like numpy's default", "[eval]") {
  std::vector<double> v{4, 1, 3, 2};
  CATCH_CHECK(train::quantile(v, 0.0) == 1);
  CATCH_CHECK(train::quantile(v, 1.0) == 4);
  CATCH_CHECK(train::quantile(v, 0.5) == 2.5);
  CATCH_CHECK(train::quantile(v, 0.025) == Approx(1.075));  // numpy.quantile([1,2,3,4], .025)
}

// Known truth: per-query values drawn as Bernoulli(0.3); the 95% interval of each of 200 samples
// of 300 queries should hold 0.3 about 95% of the time (a percentile bootstrap runs a little
// under at this size).
CATCH_TEST_CASE("eval stats: bootstrap intervals cover the true mean about 95% of the time", "[eval]") {
  SplitMix rng{42};
  int covered = 0;
  const int samples = 200;
  for (int s = 0; s < samples; ++s) {
    train::QueryTable t;
    auto& col = t.column("hit", "hit");
    for (int i = 0; i < 300; ++i) {
      t.rows.push_back(i);
      col.push_back(rng.below(10) < 3 ? 1.0 : 0.0);
    }
    auto m = train::summarise(t, 400, static_cast<uint64_t>(s));
    CATCH_REQUIRE(m[0].lo <= m[0].value);
    CATCH_REQUIRE(m[0].value <= m[0].hi);
    covered += m[0].lo <= 0.3 && 0.3 <= m[0].hi;
  }
  CATCH_CHECK(covered >= 180);  // 90%
  CATCH_CHECK(covered <= 198);  // 99%: intervals that always cover would be too wide
  // The same seed gives the same interval.
  train::QueryTable t;
  auto& col = t.column("hit", "hit");
  for (int i = 0; i < 50; ++i) {
    t.rows.push_back(i);
    col.push_back(std::fmod(i * 0.618, 1.0));
  }
  CATCH_CHECK(train::summarise(t, 100, 7)[0].lo == train::summarise(t, 100, 7)[0].lo);
  CATCH_CHECK(train::summarise(t, 100, 7)[0].hi != train::summarise(t, 100, 8)[0].hi);
}

CATCH_TEST_CASE("eval stats: --eval-k lists positive distinct cut-offs", "[eval]") {
  CATCH_CHECK(train::parse_ks("10,1,5") == std::vector<int64_t>{1, 5, 10});
  CATCH_CHECK(code_of([] { train::parse_ks("1,0"); }) == Exit::usage);
  CATCH_CHECK(code_of([] { train::parse_ks("1,1"); }) == Exit::usage);
  CATCH_CHECK(code_of([] { train::parse_ks("1,x"); }) == Exit::usage);
  CATCH_CHECK(code_of([] { train::parse_ks(""); }) == Exit::usage);
  CATCH_CHECK(test::message_of([] { train::parse_ks("3,-1"); }) ==
              "--eval-k: '-1' is not a positive integer (give a list such as 1,5,10)");
  CATCH_CHECK(test::message_of([] { train::parse_ks("1,0"); }) ==
              "--eval-k: '0' is not a positive integer (give a list such as 1,5,10)");
  CATCH_CHECK(test::message_of([] { train::parse_ks("5,5"); }) == "--eval-k: lists a cut-off twice");
}

CATCH_TEST_CASE("eval stats: a metric that does not apply to a query (NaN) is left out of its mean", "[eval]") {
  train::QueryTable t;
  const double nan = std::nan("");
  t.rows = {10, 11, 12, 13};
  t.column("r_precision", "R-precision") = {0.5, 1.0, nan, 0.0};
  t.column("accuracy_at_1", "accuracy@1") = {1, 0, 1, 1};
  auto m = train::summarise(t, 0, 1);
  CATCH_CHECK(m[0].value == Approx(0.5));  // (0.5 + 1 + 0) / 3
  CATCH_CHECK(m[1].value == Approx(0.75));
  m = train::summarise(t, 500, 1);
  CATCH_CHECK((m[0].lo >= 0.0 && m[0].hi <= 1.0 && m[0].lo < m[0].hi));
  CATCH_CHECK(!std::isnan(m[0].lo));
  CATCH_CHECK(train::dump_tsv(t, 0, false).find("12\tnan\t1") != std::string::npos);
}
