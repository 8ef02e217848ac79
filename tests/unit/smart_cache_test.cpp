#include "traincache/smart_cache.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>

#include "traincache/error.h"

using namespace traincache;

namespace {

std::vector<unsigned char> prepared(int64_t index) {
  std::vector<unsigned char> v(static_cast<std::size_t>(16 + index % 5));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(index * 13 + i);
  return v;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

CATCH_TEST_CASE("smart cache: the window moves by R = ceil(N r) per epoch and wraps", "[smart]") {
  auto p = smart::make_plan(25, 10, 0.15);  // R = ceil(1.5) = 2
  CATCH_CHECK(p.replace_num == 2);
  CATCH_CHECK(p.window(0) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CATCH_CHECK(p.window(1) == std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CATCH_CHECK(p.incoming(0) == std::vector<int64_t>{10, 11});
  CATCH_CHECK(p.window(10) == std::vector<int64_t>{20, 21, 22, 23, 24, 0, 1, 2, 3, 4});
  CATCH_CHECK(p.incoming(10) == std::vector<int64_t>{5, 6});
  CATCH_CHECK(smart::make_plan(25, 10, 1.0).replace_num == 10);
}

CATCH_TEST_CASE("smart cache: a window as large as the dataset never replaces", "[smart]") {
  auto p = smart::make_plan(8, 100, 0.5);
  CATCH_CHECK(p.cache_num == 8);
  CATCH_CHECK(p.replace_num == 0);
  CATCH_CHECK(p.window(3) == identity(8));
  CATCH_CHECK(p.incoming(3).empty());
}

CATCH_TEST_CASE("smart cache: non-positive sizes and rates are refused", "[smart]") {
  for (double r : {0.0, -0.5, 1.5}) {
    CATCH_INFO(r);
    try {
      smart::make_plan(10, 5, r);
      CATCH_FAIL("accepted");
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::usage);
      CATCH_CHECK(std::string(e.what()) == "--replace-rate: must be in (0, 1]");
    }
  }
  CATCH_CHECK_THROWS_AS(smart::make_plan(10, 0, 0.5), Error);
  CATCH_CHECK_THROWS_AS(smart::make_plan(0, 5, 0.5), Error);
}

CATCH_TEST_CASE("smart cache: every item is visited within epochs_to_cover epochs", "[smart]") {
  for (auto [len, n, r] : {std::tuple<int64_t, int64_t, double>{25, 10, 0.15}, {100, 7, 0.3}, {9, 4, 1.0}}) {
    auto p = smart::make_plan(len, n, r);
    std::set<int64_t> seen;
    for (int64_t e = 0; e < p.epochs_to_cover(); ++e)
      for (auto pos : p.window(e)) seen.insert(pos);
    CATCH_CHECK(static_cast<int64_t>(seen.size()) == len);
    std::set<int64_t> before;
    for (int64_t e = 0; e + 1 < p.epochs_to_cover(); ++e)
      for (auto pos : p.window(e)) before.insert(pos);
    CATCH_CHECK(static_cast<int64_t>(before.size()) < len);  // and not one epoch earlier
  }
}

CATCH_TEST_CASE("smart cache: the replacer's items equal what the pipeline computes", "[smart]") {
  auto plan = smart::make_plan(30, 8, 0.25);
  std::vector<int64_t> order = identity(30);
  std::reverse(order.begin(), order.end());  // a non-trivial dataset order
  smart::SmartCache cache(plan, order, prepared, 3);
  cache.start();
  for (int64_t e = 0; e < 12; ++e) {
    CATCH_REQUIRE(cache.epoch() == e);
    auto idx = cache.window_indices();
    CATCH_REQUIRE(idx.size() == 8);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      CATCH_CHECK(idx[k] == order[static_cast<std::size_t>(plan.window(e)[k])]);
      CATCH_CHECK(cache.item(idx[k]) == prepared(idx[k]));
    }
    cache.advance();
  }
}

CATCH_TEST_CASE("smart cache: shutdown with a slow replacer does not wait for the queue", "[smart]") {
  std::atomic<int> calls{0};
  auto slow = [&](int64_t i) {
    if (calls++ >= 4) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return prepared(i);
  };
  auto plan = smart::make_plan(1000, 4, 1.0);  // 4 items per replacement
  smart::SmartCache cache(plan, identity(1000), slow, 2);
  cache.start();
  auto t = std::chrono::steady_clock::now();
  cache.shutdown();  // the replacer holds at most two slow items in progress
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  CATCH_CHECK(s < 2.0);  // a liveness bound, not a speed target: the whole queue would take 0.4 s per item pair
  cache.shutdown();      // idempotent
}

CATCH_TEST_CASE("smart cache: memory is released at shutdown", "[smart]") {
  auto plan = smart::make_plan(50, 10, 0.5);
  smart::SmartCache cache(plan, identity(50), prepared, 2);
  cache.start();
  cache.advance();
  CATCH_CHECK(cache.bytes_cached() >= 10 * 16);
  cache.shutdown();
  CATCH_CHECK(cache.bytes_cached() == 0);
}

CATCH_TEST_CASE("smart cache: a failing prepare surfaces at the epoch boundary", "[smart]") {
  auto plan = smart::make_plan(20, 5, 0.2);
  auto failing = [](int64_t i) -> std::vector<unsigned char> {
    if (i == 6) throw Error(Exit::io, "item 6", "read error");
    return prepared(i);
  };
  smart::SmartCache cache(plan, identity(20), failing, 1);
  cache.start();
  CATCH_CHECK_NOTHROW(cache.advance());  // epoch 1 brings in item 5
  CATCH_CHECK_THROWS_WITH(cache.advance(), "item 6: read error");
}
