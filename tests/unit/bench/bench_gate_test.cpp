#include "traincache/bench/bench_gate.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "catch.h"
#include "test_util.h"

using namespace traincache;
using report::Json;

namespace {

Json rec(const char* strategy, int epoch, double rate) {
  return {{"strategy", strategy}, {"epoch", epoch}, {"samples_per_second", rate}};
}

}  // namespace

CATCH_TEST_CASE("bench gate: throughput is the median of the epochs after the first, or the only one", "[gate]") {
  Json r = Json::array({rec("full", 1, 10), rec("full", 2, 100), rec("full", 3, 200), rec("none", 1, 40)});
  auto t = bench::throughput(r);
  CATCH_CHECK(t.at("full") == 150.0);
  CATCH_CHECK(t.at("none") == 40.0);
  // One epoch that a busy machine slowed moves neither the median nor the noise; a spread does.
  r = Json::array({rec("full", 1, 1), rec("full", 2, 100), rec("full", 3, 10), rec("full", 4, 100), rec("full", 5, 101),
                   rec("smart", 2, 90), rec("smart", 3, 110), rec("smart", 4, 100)});
  auto s = bench::throughput_of(r);
  CATCH_CHECK(s.at("full").median == 100.0);
  CATCH_CHECK(s.at("full").epochs == 4);
  CATCH_CHECK(s.at("full").noise == Approx(0.005));  // deviations 0, 90, 0, 1: median 0.5
  CATCH_CHECK(s.at("smart").median == 100.0);
  CATCH_CHECK(s.at("smart").noise == Approx(0.10));
  auto c = bench::compare(r, r, 0.10);
  CATCH_REQUIRE(c.size() == 2);
  CATCH_CHECK(c[1].noise_before == Approx(0.10));
  CATCH_CHECK(c[1].noise_after == Approx(0.10));
}

CATCH_TEST_CASE("bench gate: the gate compares samples per CPU-second where asked, skipping records without it",
                "[gate]") {
  Json before = Json::array({rec("full", 2, 100), rec("none", 2, 50)});
  before[0]["samples_per_cpu_second"] = 40.0;  // "none": a baseline from before the field
  Json now = Json::array({rec("full", 2, 50), rec("none", 2, 10)});
  now[0]["samples_per_cpu_second"] = 38.0;
  now[1]["samples_per_cpu_second"] = 5.0;
  auto c = bench::compare(before, now, 0.10, "samples_per_cpu_second");
  CATCH_REQUIRE(c.size() == 1);
  CATCH_CHECK(c[0].strategy == "full");
  CATCH_CHECK_FALSE(c[0].regressed);  // -5% per CPU-second, where samples/s halved
  CATCH_CHECK(c[0].change == Approx(-0.05));
  CATCH_CHECK(bench::compare(before, now, 0.10)[0].regressed);
}

CATCH_TEST_CASE("bench gate: a drop beyond the limit regresses, within it does not", "[gate]") {
  Json before = Json::array({rec("full", 2, 100), rec("none", 2, 50), rec("smart", 2, 0)});
  Json now = Json::array({rec("full", 2, 89), rec("none", 2, 46), rec("smart", 2, 10), rec("embed", 2, 5)});
  auto c = bench::compare(before, now, 0.10);
  CATCH_REQUIRE(c.size() == 2);  // embed: no baseline; smart: baseline 0
  CATCH_CHECK(c[0].strategy == "full");
  CATCH_CHECK(c[0].regressed);
  CATCH_CHECK(c[0].change == Approx(-0.11));
  CATCH_CHECK(c[1].strategy == "none");
  CATCH_CHECK_FALSE(c[1].regressed);
  CATCH_CHECK(c[1].change == Approx(-0.08));
}

CATCH_TEST_CASE("bench gate: settings that differ from the baseline's are named, nested ones by path", "[gate]") {
  const report::Json was = report::Json::parse(R"({"items": 500, "preprocess": {"resize": "128", "channels": "rgb"},
                                                  "old_only": 1})");
  const report::Json now = report::Json::parse(R"({"items": 100, "preprocess": {"resize": "32", "channels": "rgb"},
                                                  "model_sha256": "ab"})");
  CATCH_CHECK(bench::config_differences(was, now) ==
              std::vector<std::string>{"items: 500 -> 100", "preprocess/resize: \"128\" -> \"32\""});
  CATCH_CHECK(bench::config_differences(now, now).empty());
  CATCH_CHECK(bench::config_differences(nullptr, now).empty());  // a baseline without a config
}

CATCH_TEST_CASE("bench gate: a baseline that is not a smart-bench document is bad data", "[gate]") {
  std::string path = "/tmp/tc-gate-" + std::to_string(::getpid()) + ".json";
  for (const char* text : {"[1,2]", "{\"records\": 3}", "{\"records\": [{\"strategy\": 1, \"epoch\": 1}]}",
                           "{\"records\": [{\"strategy\": \"x\", \"epoch\": 1.5, \"samples_per_second\": 2}]}", "{"}) {
    CATCH_INFO(text);
    std::ofstream(path) << text;
    CATCH_CHECK(test::code_of([&] { bench::read_baseline(path); }) == Exit::data);
  }
  std::ofstream(path) << R"({"records": [{"strategy": "x", "epoch": 2, "samples_per_second": 2.5}]})";
  CATCH_CHECK(bench::read_baseline(path).size() == 1);
  std::remove(path.c_str());
  CATCH_CHECK(test::code_of([&] { bench::read_baseline(path); }) == Exit::no_input);
}
