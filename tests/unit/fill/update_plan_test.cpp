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
  CATCH_CHECK(plan.unchanged == 2);
  CATCH_CHECK(plan.changed == 1);
  CATCH_CHECK(plan.added == 1);
  CATCH_CHECK(plan.removed == 1);
  CATCH_CHECK(plan.ambiguous == 0);
  // Each row's fate and the cache row its key found, which --changes lists; d's row is removed.
  using F = fill::RowFate;
  CATCH_CHECK(plan.fate == std::vector<F>{F::kept, F::changed, F::added, F::kept});
  CATCH_CHECK(plan.found == std::vector<int64_t>{2, 0, -1, 1});
  CATCH_CHECK(plan.removed_rows == std::vector<int64_t>{3});
}

CATCH_TEST_CASE("update plan: without keys on either side, rows match by position", "[fill]") {
  auto plan = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({"x", "y", "z", "w"}, {1, 7, 3, 4}));
  CATCH_CHECK_FALSE(plan.by_key);
  CATCH_CHECK(plan.source == std::vector<int64_t>{0, -1, 2, -1});
  CATCH_CHECK(plan.unchanged == 2);
  CATCH_CHECK(plan.changed == 1);
  CATCH_CHECK(plan.added == 1);
  CATCH_CHECK(plan.removed == 0);
  using F = fill::RowFate;
  CATCH_CHECK(plan.fate == std::vector<F>{F::kept, F::changed, F::kept, F::added});
  CATCH_CHECK(plan.found == std::vector<int64_t>{0, 1, 2, -1});
  auto shrunk = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({}, {1}));
  CATCH_CHECK(shrunk.removed == 2);
  CATCH_CHECK(shrunk.unchanged == 1);
  CATCH_CHECK(shrunk.removed_rows == std::vector<int64_t>{1, 2});
}

CATCH_TEST_CASE("update plan: a row found nowhere else keeps the one cache row of its content (moved)", "[fill]") {
  // By key: b renamed x (its content, digest 2, unchanged) is copied, not encoded again.
  auto renamed = fill::match_rows(rows({"a", "b", "c"}, {1, 2, 3}), {}, rows({"a", "x", "c"}, {1, 2, 3}));
  CATCH_CHECK(renamed.source == std::vector<int64_t>{0, 1, 2});
  CATCH_CHECK(renamed.unchanged == 2);
  CATCH_CHECK(renamed.moved == 1);
  CATCH_CHECK(renamed.added == 0);
  CATCH_CHECK(renamed.removed == 1);
  CATCH_CHECK(renamed.fate[1] == fill::RowFate::moved);
  CATCH_CHECK(renamed.removed_rows == std::vector<int64_t>{1});
  // By position: a row inserted at 1 moves the rows after it; only the new one is encoded.
  auto shifted = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({}, {1, 9, 2, 3}));
  CATCH_CHECK(shifted.source == std::vector<int64_t>{0, -1, 1, 2});
  CATCH_CHECK(shifted.unchanged == 1);
  CATCH_CHECK(shifted.changed == 1);
  CATCH_CHECK(shifted.moved == 2);
  CATCH_CHECK(shifted.added == 0);
  // A content two cache rows share moves to the first of them; one the cache skipped moves
  // nowhere: encoded again.
  auto twice = fill::match_rows(rows({"a", "b", "c"}, {5, 5, 6}), {2}, rows({"x", "y"}, {5, 6}));
  CATCH_CHECK(twice.source == std::vector<int64_t>{0, -1});
  CATCH_CHECK(twice.moved == 1);
  CATCH_CHECK(twice.added == 1);
}

CATCH_TEST_CASE("update plan: a row whose content a kept row also has is a copy, not a move", "[fill]") {
  RowIdentity old = rows({"a", "b", "c"}, {1, 2, 3});
  for (uint8_t v : {11, 12, 13}) old.files.push_back(d(v));
  // y, a copy of b's file (another name, so another row digest), before or after b
  for (bool first : {false, true}) {
    RowIdentity now = first ? rows({"y", "a", "b", "c"}, {8, 1, 2, 3}) : rows({"a", "b", "c", "y"}, {1, 2, 3, 8});
    for (uint8_t v : {11, 12, 13}) now.files.push_back(d(v));
    now.files.insert(first ? now.files.begin() : now.files.end(), d(12));
    auto plan = fill::match_rows(old, {}, now);
    const std::size_t y = first ? 0 : 3;
    CATCH_CHECK(plan.source[y] == 1);
    CATCH_CHECK(plan.fate[y] == fill::RowFate::copy);
    CATCH_CHECK(plan.copies == 1);
    CATCH_CHECK(plan.moved == 0);
    CATCH_CHECK(plan.unchanged == 3);
    CATCH_CHECK(plan.added == 0);
    CATCH_CHECK(fill::rows_to_encode(plan).empty());
  }
  // b renamed twice (x and z, b gone): the first moved, the second a copy of it.
  RowIdentity now = rows({"a", "x", "z", "c"}, {1, 7, 9, 3});
  for (uint8_t v : {11, 12, 12, 13}) now.files.push_back(d(v));
  auto twice = fill::match_rows(old, {}, now);
  CATCH_CHECK(twice.source == std::vector<int64_t>{0, 1, 1, 2});
  CATCH_CHECK(twice.fate == std::vector<fill::RowFate>{fill::RowFate::kept, fill::RowFate::moved, fill::RowFate::copy,
                                                       fill::RowFate::kept});
  CATCH_CHECK(twice.removed_rows == std::vector<int64_t>{1});
  // By position: a line repeated below itself copies it; the lines after it move down one.
  auto repeated = fill::match_rows(rows({}, {1, 2, 3}), {}, rows({}, {1, 1, 2, 3}));
  CATCH_CHECK(repeated.source == std::vector<int64_t>{0, 0, 1, 2});
  CATCH_CHECK(repeated.fate == std::vector<fill::RowFate>{fill::RowFate::kept, fill::RowFate::copy,
                                                          fill::RowFate::moved, fill::RowFate::moved});
  CATCH_CHECK(repeated.copies == 1);
  CATCH_CHECK(repeated.moved == 2);
  CATCH_CHECK(std::string(fill::fate_name(fill::RowFate::copy)) == "copy");
}

CATCH_TEST_CASE("update plan: a renamed file keeps the cache row of its bytes (file digests)", "[fill]") {
  // Row digests hold the file's name (b renamed x: 2 became 7), file digests only its bytes.
  RowIdentity old = rows({"a", "b", "c"}, {1, 2, 3}), now = rows({"a", "x", "c"}, {1, 7, 3});
  auto by_name = fill::match_rows(old, {}, now);  // without file digests: x is new
  CATCH_CHECK(by_name.source == std::vector<int64_t>{0, -1, 2});
  CATCH_CHECK(by_name.added == 1);
  for (uint8_t v : {11, 12, 13}) old.files.push_back(d(v));
  auto one_side = fill::match_rows(old, {}, now);  // only one side has them: as without
  CATCH_CHECK(one_side.source == std::vector<int64_t>{0, -1, 2});
  for (uint8_t v : {11, 12, 13}) now.files.push_back(d(v));
  auto renamed = fill::match_rows(old, {}, now);
  CATCH_CHECK(renamed.source == std::vector<int64_t>{0, 1, 2});
  CATCH_CHECK(renamed.moved == 1);
  CATCH_CHECK(renamed.added == 0);
  CATCH_CHECK(renamed.removed_rows == std::vector<int64_t>{1});
  CATCH_CHECK(renamed.fate ==
              std::vector<fill::RowFate>{fill::RowFate::kept, fill::RowFate::moved, fill::RowFate::kept});
  // Two cached files with the same bytes: the renamed one takes the first of them.
  old.files[2] = d(12);
  auto twice = fill::match_rows(old, {}, now);
  CATCH_CHECK(twice.source == std::vector<int64_t>{0, 1, 2});
  CATCH_CHECK(twice.moved == 1);
  CATCH_CHECK(twice.added == 0);
  // Their numbers must agree with the row digests'.
  now.files.pop_back();
  CATCH_CHECK_THROWS_AS(fill::match_rows(old, {}, now), Error);
}

CATCH_TEST_CASE("update plan: a skipped row is kept by the data but encoded again", "[fill]") {
  auto plan = fill::match_rows(rows({"a", "b"}, {1, 2}), {1}, rows({"a", "b"}, {1, 2}));
  CATCH_CHECK(plan.unchanged == 2);
  CATCH_CHECK(plan.source == std::vector<int64_t>{0, -1});
}

CATCH_TEST_CASE("update plan: a key that is not unique matches nothing", "[fill]") {
  // "a" twice in the cache, "b" twice in the input: those rows are encoded again.
  auto plan = fill::match_rows(rows({"a", "a", "b", "c"}, {1, 1, 2, 3}), {}, rows({"a", "b", "b", "c"}, {1, 2, 2, 3}));
  CATCH_CHECK(plan.source == std::vector<int64_t>{-1, -1, -1, 3});
  CATCH_CHECK(plan.ambiguous == 3);
  CATCH_CHECK(plan.changed == 3);
  CATCH_CHECK(plan.unchanged == 1);
  CATCH_CHECK(plan.removed == 0);
  CATCH_CHECK_THROWS_AS(fill::match_rows(rows({"a"}, {1, 2}), {}, rows({}, {1})), Error);
}

CATCH_TEST_CASE("update plan: every row that keeps no cache row is encoded, and only those", "[fill]") {
  fill::UpdatePlan plan;
  plan.source = {0, 1, 2, -1, 4, -1, -1, 7};
  CATCH_CHECK(fill::rows_to_encode(plan) == std::vector<int64_t>{3, 5, 6});
  plan.source = {3, 2, 1};
  CATCH_CHECK(fill::rows_to_encode(plan).empty());
  // A row the cache skipped is encoded again, and counted as such.
  auto skipped = fill::match_rows(rows({"a", "b", "c"}, {1, 2, 3}), {0, 2}, rows({"c", "b", "a"}, {3, 2, 1}));
  CATCH_CHECK(skipped.skipped_before == 2);
  CATCH_CHECK(fill::rows_to_encode(skipped) == std::vector<int64_t>{0, 2});
}

CATCH_TEST_CASE("update plan: data, labels, keys and batching are what an update absorbs", "[fill]") {
  auto doc = [](int rows, const char* digest, int width, const char* labels, const char* keys, int batch,
                const char* dtype) {
    return std::string(R"({"input": {"rows": [0, )") + std::to_string(rows) + R"(], "content_xxh3": ")" + digest +
           R"(", "features": {"x": {"shape": [)" + std::to_string(rows) + ", " + std::to_string(width) +
           R"(], "dtype": "float32"}}, "labels": )" + labels + R"(, "keys": )" + keys +
           R"(}, "options": {"batch_size": )" + std::to_string(batch) + R"(, "dtype": ")" + dtype + R"("}})";
  };
  const char* labels = R"({"shape": [10], "dtype": "int64", "name": "labels"})";
  const std::string a = doc(10, "aa", 3, labels, "null", 5, "float32");
  CATCH_CHECK(fill::only_data_changed(a, doc(12, "bb", 3, labels, "null", 5, "float32")));  // rows added
  CATCH_CHECK(fill::only_data_changed(a, doc(10, "aa", 3, "null", "null", 5, "float32")));  // labels removed
  CATCH_CHECK(fill::only_data_changed(a, doc(10, "aa", 3, labels, R"({"name": "id"})", 5, "float32")));  // keys
  CATCH_CHECK(fill::only_data_changed(a, doc(10, "aa", 3, labels, "null", 64, "float32")));       // another batch size
  CATCH_CHECK_FALSE(fill::only_data_changed(a, doc(10, "aa", 4, labels, "null", 5, "float32")));  // row shape
  CATCH_CHECK_FALSE(fill::only_data_changed(a, doc(10, "aa", 3, labels, "null", 5, "float16")));  // stored dtype
  CATCH_CHECK_FALSE(fill::only_data_changed("not json", a));
}
