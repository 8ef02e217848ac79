#include "traincache/fill/fill_plan.h"

#include "catch.h"
#include "test_util.h"
#include "traincache/base/error.h"

using namespace traincache;
using test::code_of;

namespace {

fill::FillOptions options(int64_t batch, int index = -1, int count = 0) {
  fill::FillOptions o;
  o.encoders = {{"cnn", "cnn.pt", {}, "", {}, ""}};
  o.out = "out.h5";
  o.batch_size = batch;
  o.shard_index = index;
  o.shard_count = count;
  return o;
}

}  // namespace

CATCH_TEST_CASE("fill plan: shards are contiguous, balanced runs of whole batches covering the job", "[fill]") {
  // 1000 rows in batches of 64: 16 batches (the last of 40 rows) over 3 shards: 5, 5, 6 batches.
  int64_t at = 0;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 3; ++i) {
    auto p = fill::plan_rows(options(64, i, 3), 1000);
    CATCH_CHECK(p.sharded);
    CATCH_CHECK(p.begin == at);
    CATCH_CHECK(p.begin % 64 == 0);
    CATCH_CHECK(p.job_begin == 0);
    CATCH_CHECK(p.job_end == 1000);
    sizes.push_back(p.rows());
    at = p.end;
  }
  CATCH_CHECK(at == 1000);
  CATCH_CHECK(sizes == std::vector<int64_t>{320, 320, 360});
}

CATCH_TEST_CASE("fill plan: --rows narrows the job and shards stay inside it", "[fill]") {
  auto o = options(10, 1, 2);
  o.row_begin = 5;
  o.row_end = 45;  // 4 batches: shard 1 has rows 25..45
  auto p = fill::plan_rows(o, 100);
  CATCH_CHECK(p.begin == 25);
  CATCH_CHECK(p.end == 45);
  CATCH_CHECK(p.job_begin == 5);
  CATCH_CHECK(p.job_end == 45);
  auto whole = fill::plan_rows(options(10), 100);
  CATCH_CHECK(!whole.sharded);
  CATCH_CHECK(whole.rows() == 100);
}

CATCH_TEST_CASE("fill plan: impossible ranges and shard counts are usage errors", "[fill]") {
  auto o = options(64);
  o.row_begin = 100;
  CATCH_CHECK(code_of([&] { fill::plan_rows(o, 100); }) == Exit::usage);
  CATCH_CHECK(code_of([&] { fill::plan_rows(options(64, 3, 3), 1000); }) == Exit::usage);
  CATCH_CHECK(code_of([&] { fill::plan_rows(options(64, 0, 20), 1000); }) == Exit::usage);  // 16 batches
  try {
    fill::plan_rows(options(64, 0, 20), 1000);
  } catch (const Error& e) {
    CATCH_CHECK(std::string(e.what()) == "--shard: 20 shards for only 16 batches");
  }
  // Every shard refuses, not only those left without a batch: a job some of whose shards ran can
  // never be merged. 22 rows in batches of 256 over 2 shards: 1 batch.
  for (int i = 0; i < 20; ++i) CATCH_CHECK(code_of([&] { fill::plan_rows(options(64, i, 20), 1000); }) == Exit::usage);
  for (int i = 0; i < 2; ++i) CATCH_CHECK(code_of([&] { fill::plan_rows(options(256, i, 2), 22); }) == Exit::usage);
}

CATCH_TEST_CASE("fill plan: an input of several files is shared out by whole files", "[fill]") {
  // Five tar shards of 30, 30, 25, 40 and 5 rows (first rows 0, 30, 60, 85, 125), 130 rows in all.
  const std::vector<int64_t> files{0, 30, 60, 85, 125};
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int i = 0; i < 2; ++i) {
    auto p = fill::plan_rows(options(16, i, 2), 130, files);
    ranges.emplace_back(p.begin, p.end);
  }
  CATCH_CHECK(ranges == std::vector<std::pair<int64_t, int64_t>>{{0, 60}, {60, 130}});  // files 0-1, 2-4
  auto o = options(16, 1, 2);
  o.row_begin = 40;  // the job's first file is the rest of file 1: files [40, 60), [60, 85), ... -> 4
  auto p = fill::plan_rows(o, 130, files);
  CATCH_CHECK(p.begin == 85);
  CATCH_CHECK(p.end == 130);
  try {
    fill::plan_rows(options(16, 0, 6), 130, files);
    CATCH_FAIL("six shards of five files");
  } catch (const Error& e) {
    CATCH_CHECK(std::string(e.what()) == "--shard: 6 shards for only 5 input files (each shard takes whole files)");
    CATCH_CHECK(e.code() == Exit::usage);
  }
  for (int i = 0; i < 6; ++i)
    CATCH_CHECK(code_of([&] { fill::plan_rows(options(16, i, 6), 130, files); }) == Exit::usage);
}

CATCH_TEST_CASE("fill plan: units are cut where a file begins, so shards batch as one process does", "[fill]") {
  using Units = std::vector<std::pair<int64_t, int64_t>>;
  CATCH_CHECK(fill::unit_ranges(0, 50, 16, {}) == Units{{0, 16}, {16, 16}, {32, 16}, {48, 2}});
  const std::vector<int64_t> files{0, 30, 60, 85, 125};
  const Units whole = fill::unit_ranges(0, 130, 16, files);
  CATCH_CHECK(whole ==
              Units{{0, 16}, {16, 14}, {30, 16}, {46, 14}, {60, 16}, {76, 9}, {85, 16}, {101, 16}, {117, 8}, {125, 5}});
  // A shard of files 2-4 has exactly the single process's units from row 60 on.
  const Units shard = fill::unit_ranges(60, 130, 16, files);
  CATCH_CHECK(shard == Units(whole.begin() + 4, whole.end()));
}

CATCH_TEST_CASE("fill plan: option checks", "[fill]") {
  CATCH_CHECK(code_of([] { fill::validate_options(options(64)); }) == Exit::ok);
  CATCH_CHECK(code_of([] { fill::validate_options(options(0)); }) == Exit::usage);
  auto twice = options(64);
  twice.encoders.push_back(twice.encoders[0]);
  CATCH_CHECK(code_of([&] { fill::validate_options(twice); }) == Exit::usage);
  auto dotted = options(64);
  dotted.encoders[0].name = "a.b";
  CATCH_CHECK(code_of([&] { fill::validate_options(dotted); }) == Exit::usage);
  auto latin1 = options(64);  // journalled as U+FFFD, it made every resume "journal damaged"
  latin1.encoders[0].name = "caf\xe9";
  CATCH_CHECK(code_of([&] { fill::validate_options(latin1); }) == Exit::usage);
  auto utf8 = options(64);
  utf8.encoders[0].name = "caf\xc3\xa9";
  CATCH_CHECK(code_of([&] { fill::validate_options(utf8); }) == Exit::ok);
  auto f64 = options(64);
  f64.dtype = DType::f64;
  CATCH_CHECK(code_of([&] { fill::validate_options(f64); }) == Exit::usage);
}

CATCH_TEST_CASE("fill plan: fingerprint diffs name settings, not array elements", "[fill]") {
  std::string a = R"({"input": {"rows": [0, 10], "path": "/x"}, "encoders": {"cnn": {"sha256": "aa"}}})";
  std::string b = R"({"input": {"rows": [0, 20], "path": "/x"}, "encoders": {"cnn": {"sha256": "bb"}}})";
  CATCH_CHECK(fill::fingerprint_diff(a, b) == "encoders/cnn/sha256, input/rows");
  CATCH_CHECK(fill::fingerprint_diff(a, a) == "unknown");
  CATCH_CHECK(fill::fingerprint_diff("not json", b) == "unreadable stored fingerprint");
}
