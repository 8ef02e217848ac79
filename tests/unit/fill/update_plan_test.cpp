#include "traincache/fill/update_plan.h"

#include "catch.h"
#include "test_util.h"
#include "traincache/base/error.h"

using namespace traincache;
using fill::RowIdentity;

namespace {

// A digest made of one byte, so that rows with equal `v` have equal digests.
Digest128 d(uint8_t v) {
  Digest128 x{};
  x[0] = v;
  return x;
}

RowIdentity rows(std::vector<std::string> keys, std::vector<uint8_t> values) {
  RowIdentity r;
  r.keys = std::move(keys);
  for (auto v : values) r.digests.push_back(d(v));
  return r;
}

}  // namespace

CATCH_TEST_CASE("update plan: by key, rows added, changed, removed and moved at once", "[fill]") {
  // Cache: a b c d. Input: c a' e b (d removed, a changed, e added, c and b moved).
  auto plan = fill::match_rows(rows({"a", "b", "c", "d"}, {1, 2, 3, 4}), {}, rows({"c", "a", "e", "b"}, {3, 9, 5, 2}));
  CATCH_CHECK(plan.by_key);
  CATCH_CHECK(plan.source == std::vector<int64_t>{2, -1, -1, 1});
  CATCH_CHECK(plan.kept == 2);
  CATCH_CHECK(plan.changed == 1);
  CATCH_CHECK(plan.added == 1);
  CATCH_CHECK(plan.removed == 1);
  CATCH_CHECK(plan.ambiguous == 0);
}

CATCH_TEST_CASE("update plan: without keys on either side, rows match by position", "[fill]") {
  auto plan = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({"x", "y", "z", "w"}, {1, 7, 3, 4}));
  CATCH_CHECK_FALSE(plan.by_key);
  CATCH_CHECK(plan.source == std::vector<int64_t>{0, -1, 2, -1});
  CATCH_CHECK(plan.kept == 2);
  CATCH_CHECK(plan.changed == 1);
  CATCH_CHECK(plan.added == 1);
  CATCH_CHECK(plan.removed == 0);
  auto shrunk = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({}, {1}));
  CATCH_CHECK(shrunk.removed == 2);
  CATCH_CHECK(shrunk.kept == 1);
}

CATCH_TEST_CASE("update plan: a skipped row is kept by the data but encoded again", "[fill]") {
  auto plan = fill::match_rows(rows({"a", "b"}, {1, 2}), {1}, rows({"a", "b"}, {1, 2}));
  CATCH_CHECK(plan.kept == 2);
  CATCH_CHECK(plan.source == std::vector<int64_t>{0, -1});
}

CATCH_TEST_CASE("update plan: a key that is not unique matches nothing", "[fill]") {
  // "a" twice in the cache, "b" twice in the input: those rows are encoded again.
  auto plan = fill::match_rows(rows({"a", "a", "b", "c"}, {1, 1, 2, 3}), {}, rows({"a", "b", "b", "c"}, {1, 2, 2, 3}));
  CATCH_CHECK(plan.source == std::vector<int64_t>{-1, -1, -1, 3});
  CATCH_CHECK(plan.ambiguous == 3);
  CATCH_CHECK(plan.changed == 3);
  CATCH_CHECK(plan.kept == 1);
  CATCH_CHECK(plan.removed == 0);
  CATCH_CHECK_THROWS_AS(fill::match_rows(rows({"a"}, {1, 2}), {}, rows({}, {1})), Error);
}

CATCH_TEST_CASE("update plan: a unit is copied only when every row of it keeps a cache row", "[fill]") {
  fill::UpdatePlan plan;
  plan.source = {0, 1, 2, -1, 4, 5, 6, 7};
  CATCH_CHECK(fill::copied_units(plan, {{0, 3}, {3, 2}, {5, 3}}) == std::vector<bool>{true, false, true});
}

CATCH_TEST_CASE("update plan: only the input's rows, content and row counts are data", "[fill]") {
  const std::string a = R"({"input": {"rows": [0, 10], "content_xxh3": "aa", "features": {"x": {"shape": [10, 3],
      "dtype": "float32"}}, "labels": {"shape": [10], "dtype": "int64"}, "keys": null}, "options": {"batch_size": 5}})";
  const std::string more = R"({"input": {"rows": [0, 12], "content_xxh3": "bb", "features": {"x": {"shape": [12, 3],
      "dtype": "float32"}}, "labels": {"shape": [12], "dtype": "int64"}, "keys": null}, "options": {"batch_size": 5}})";
  const std::string wider = R"({"input": {"rows": [0, 10], "content_xxh3": "aa", "features": {"x": {"shape": [10, 4],
      "dtype": "float32"}}, "labels": {"shape": [10], "dtype": "int64"}, "keys": null}, "options": {"batch_size": 5}})";
  const std::string batch = R"({"input": {"rows": [0, 10], "content_xxh3": "aa", "features": {"x": {"shape": [10, 3],
      "dtype": "float32"}}, "labels": {"shape": [10], "dtype": "int64"}, "keys": null}, "options": {"batch_size": 6}})";
  CATCH_CHECK(fill::only_data_changed(a, more));
  CATCH_CHECK_FALSE(fill::only_data_changed(a, wider));
  CATCH_CHECK_FALSE(fill::only_data_changed(a, batch));
  CATCH_CHECK_FALSE(fill::only_data_changed("not json", a));
}
