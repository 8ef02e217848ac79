#include "traincache/fill/bottleneck.h"

#include "catch.h"
#include "traincache/base/format.h"

using namespace traincache;
using fill::FillTimings;

namespace {

// 20,000 rows in a 7 s run whose encode loop took 6 s; 16 readers.
FillTimings timings() {
  FillTimings t;
  t.rows = 20000;
  t.readers = 16;
  t.seconds = 7.0;
  t.loop_seconds = 6.0;
  t.model_setup_seconds = 0.6;
  t.digest_seconds = 0.2;
  t.publish_seconds = 0.2;
  return t;
}

const fill::Bottleneck::Stage& stage(const fill::Bottleneck& b, const std::string& name) {
  for (const auto& s : b.stages)
    if (s.name == name) return s;
  throw std::runtime_error("no stage " + name);
}

}  // namespace

CATCH_TEST_CASE("bottleneck: readers slower than the encoder, decode their largest part", "[fill]") {
  FillTimings t = timings();
  t.busy.input = 89.6;  // 16 threads, 5.6 s each: 20,000 x 16 / 89.6 = 3,571 rows/s
  t.busy.decode = 60.0;
  t.busy.resize = 20.0;
  t.busy.forward = 2.0;  // 10,000 rows/s
  t.busy.convert = 0.5;
  t.busy.to_host = 0.1;
  t.busy.store = 1.0;
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->bound == "decode");
  CATCH_CHECK(b->group == "readers");
  CATCH_CHECK(b->group_rows_per_second == Approx(20000.0 * 16 / 89.6));
  CATCH_CHECK(b->forward_rows_per_second == Approx(10000.0));
  CATCH_CHECK(b->rows_per_second == Approx(20000.0 / 7.0));
  CATCH_CHECK(b->model_fraction == Approx(2.0 / 7.0));
  CATCH_CHECK(stage(*b, "read").busy_seconds == Approx(9.6));  // what input holds besides its parts
  CATCH_CHECK(stage(*b, "decode").busy_share == Approx(60.0 / (16 * 6.0)));
  CATCH_CHECK(stage(*b, "decode").rows_per_second == Approx(20000.0 * 16 / 60.0));
  CATCH_CHECK(stage(*b, "forward").busy_share == Approx(2.0 / 6.0));
  CATCH_CHECK(b->verdict ==
              "bound by decode: 16 readers 3,571 rows/s; forward alone 10,000 rows/s; 0.29 of the model's speed");
}

CATCH_TEST_CASE("bottleneck: the encoder itself, the encode thread's other parts, the store", "[fill]") {
  FillTimings t = timings();
  t.readers = 1;
  t.busy.input = 1.0;
  t.busy.forward = 5.0;
  t.busy.convert = 0.4;
  t.busy.store = 2.0;
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->bound == "forward");
  CATCH_CHECK(b->verdict ==
              "bound by forward: the encode thread 3,704 rows/s; forward alone 4,000 rows/s; 0.71 of the "
              "model's speed");

  t.busy.convert = 5.5;  // the encode thread's conversions outweigh its forward calls
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->bound == "convert");
  CATCH_CHECK(b->group_rows_per_second == Approx(20000.0 / 10.5));
  CATCH_CHECK(b->verdict ==
              "bound by convert: the encode thread 1,905 rows/s; forward alone 4,000 rows/s; 0.71 of "
              "the model's speed");

  t.busy.convert = 0.1;
  t.busy.store = 5.9;  // wide rows: storing outlasts encoding
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->bound == "store");
  CATCH_CHECK(b->verdict.rfind("bound by store: the store thread 3,390 rows/s; forward alone 4,000 rows/s", 0) == 0);
}

CATCH_TEST_CASE("bottleneck: conversion on a thread of its own is a group of its own", "[fill]") {
  FillTimings t = timings();  // the H200's --decode device run of 2026-11-28: decoding beside the forward
  t.convert_thread = true;
  t.busy.input = 1.0;
  t.busy.convert = 2.2;  // 9,091 rows/s
  t.busy.forward = 2.0;  // 10,000 rows/s
  t.busy.to_host = 0.1;
  t.busy.store = 0.3;
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->bound == "convert");
  CATCH_CHECK(b->group == "convert");
  CATCH_CHECK(b->group_rows_per_second == Approx(20000.0 / 2.2));
  CATCH_CHECK(stage(*b, "convert").busy_share == Approx(2.2 / 6.0));
  CATCH_CHECK(b->verdict ==
              "bound by convert: the convert thread 9,091 rows/s; forward alone 10,000 rows/s; 0.29 of the "
              "model's speed");

  t.busy.convert = 1.5;  // the conversions no longer add to the encode thread's forward calls
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->bound == "forward");
  CATCH_CHECK(b->group == "encode");
  CATCH_CHECK(b->group_rows_per_second == Approx(20000.0 / 2.1));

  t.convert_thread = false;  // the same times on one thread: they add up
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->group == "encode");
  CATCH_CHECK(b->group_rows_per_second == Approx(20000.0 / 3.6));
}

CATCH_TEST_CASE("bottleneck: fixed costs longer than the loop; nothing encoded", "[fill]") {
  FillTimings t = timings();
  t.rows = 100;
  t.seconds = 1.5;
  t.loop_seconds = 0.1;
  t.model_setup_seconds = 1.04;
  t.digest_seconds = 0.21;
  t.publish_seconds = 0.14;
  t.readers = 2;
  t.busy.input = 0.05;
  t.busy.forward = 0.02;
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->bound == "fixed costs");
  CATCH_CHECK(b->fixed_seconds == Approx(1.4));
  CATCH_CHECK(b->group == "readers");  // the loop's own bound is still reported, in group
  CATCH_CHECK(b->verdict ==
              "bound by fixed costs: 1.40 of 1.50 s (model setup 1.04 s, input digests 0.21 s, publish 0.14 s); "
              "forward alone 5,000 rows/s; 0.01 of the model's speed");

  t.rows = 0;  // an update that copied everything
  CATCH_CHECK(!fill::find_bottleneck(t));
  t.rows = 100;
  t.busy.forward = 0;
  CATCH_CHECK(!fill::find_bottleneck(t));
}

CATCH_TEST_CASE("bottleneck: text's padding share, and its remedy when large", "[fill]") {
  FillTimings t = timings();
  t.readers = 1;
  t.busy.input = 1.0;
  t.busy.forward = 5.0;
  t.tokens = 7523;  // issue 59: 481 sentences in batches padded to 256 tokens, 61,440 slots
  t.token_slots = 61440;
  t.padding_remedy = "fewer token slots per batch (--max-tokens) or longer windows (--length-window)";
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->padding_share == Approx(1.0 - 7523.0 / 61440));
  CATCH_CHECK(b->verdict ==
              "bound by forward: the encode thread 4,000 rows/s; forward alone 4,000 rows/s; 0.71 of the "
              "model's speed; padding 88% of the token slots: fewer token slots per batch (--max-tokens) or "
              "longer windows (--length-window)");

  t.token_slots = 9000;  // 16% padding: said, no remedy
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->verdict ==
              "bound by forward: the encode thread 4,000 rows/s; forward alone 4,000 rows/s; 0.71 of the "
              "model's speed; padding 16% of the token slots");

  t.token_slots = 0;  // no text
  b = fill::find_bottleneck(t);
  CATCH_CHECK(b->padding_share == -1);
  CATCH_CHECK(b->verdict.find("padding") == std::string::npos);
}

CATCH_TEST_CASE("bottleneck: an int8 fill's line names the CPU's int8 instructions, last", "[fill]") {
  FillTimings t = timings();
  t.readers = 1;
  t.busy.input = 1.0;
  t.busy.forward = 5.0;
  t.tokens = 8000;
  t.token_slots = 10000;
  t.int8_instructions = "AVX512-VNNI";
  auto b = fill::find_bottleneck(t);
  CATCH_REQUIRE(b);
  CATCH_CHECK(b->int8_instructions == "AVX512-VNNI");
  CATCH_CHECK(b->verdict ==
              "bound by forward: the encode thread 4,000 rows/s; forward alone 4,000 rows/s; 0.71 of the "
              "model's speed; padding 20% of the token slots; int8 on a CPU with AVX512-VNNI");
  t.seconds = 100;  // bound by fixed costs: still said
  CATCH_CHECK(fill::find_bottleneck(t)->bound == "fixed costs");
  CATCH_CHECK(fill::find_bottleneck(t)->verdict.find("; int8 on a CPU with AVX512-VNNI") != std::string::npos);
  t.int8_instructions.clear();
  CATCH_CHECK(fill::find_bottleneck(t)->verdict.find("int8") == std::string::npos);
}

CATCH_TEST_CASE("format_count sets thousands apart", "[base]") {
  CATCH_CHECK(format_count(0) == "0");
  CATCH_CHECK(format_count(999.4) == "999");
  CATCH_CHECK(format_count(1000) == "1,000");
  CATCH_CHECK(format_count(7150.5) == "7,151");
  CATCH_CHECK(format_count(10017) == "10,017");
  CATCH_CHECK(format_count(1234567890) == "1,234,567,890");
  CATCH_CHECK(format_count(-4321) == "-4,321");
}
