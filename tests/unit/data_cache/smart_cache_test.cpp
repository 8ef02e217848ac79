#include "traincache/data_cache/smart_cache.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "catch.h"
#include "slab/shm_prefix.h"
#include "test_util.h"
#include "traincache/base/error.h"
#include "traincache/slab/shm_slab.h"

using namespace traincache;

namespace {

// Item i's 4 int32 values.
std::vector<int32_t> item(int64_t i) {
  const auto v = static_cast<int32_t>(i);
  return {v * 7, v * 7 + 1, -v, 12345};
}

// A Prepare that writes item(i) and counts its calls; `fail_at` throws for that item.
data_cache::Prepare preparer(std::atomic<int>* calls, int64_t fail_at = -1, int sleep_ms = 0) {
  return [=](const std::vector<int64_t>& items, void* out) {
    for (std::size_t j = 0; j < items.size(); ++j) {
      if (items[j] == fail_at) throw Error(Exit::io, "item " + std::to_string(fail_at), "read error");
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      auto v = item(items[j]);
      std::memcpy(static_cast<char*>(out) + j * 16, v.data(), 16);
      ++*calls;
    }
  };
}

data_cache::WindowOptions options(const data_cache::WindowPlan& plan, std::vector<int64_t> items,
                                  const std::string& name) {
  data_cache::WindowOptions o;
  o.plan = plan;
  o.items = std::make_shared<const std::vector<int64_t>>(std::move(items));
  o.dtype = DType::i32;
  o.dims = {4};
  o.name = name;
  o.content_id = "test:" + name;
  o.tool = "core_test";
  return o;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

CATCH_TEST_CASE("smart cache: the window moves by R = ceil(N r) per epoch and wraps", "[smart]") {
  auto p = data_cache::make_plan(25, 10, 0.15);  // R = ceil(1.5) = 2
  CATCH_CHECK(p.replace_num == 2);
  CATCH_CHECK(p.window(0) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CATCH_CHECK(p.window(1) == std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CATCH_CHECK(p.incoming(0) == std::vector<int64_t>{10, 11});
  CATCH_CHECK(p.window(10) == std::vector<int64_t>{20, 21, 22, 23, 24, 0, 1, 2, 3, 4});
  CATCH_CHECK(p.incoming(10) == std::vector<int64_t>{5, 6});
  CATCH_CHECK(data_cache::make_plan(25, 10, 1.0).replace_num == 10);
  CATCH_CHECK(data_cache::make_plan(25, 20, 0.5).replace_num == 5);  // at most what is outside the window
  CATCH_CHECK(p.first_key(10) == 20);
  CATCH_CHECK(p.slots() == 12);
}

CATCH_TEST_CASE("smart cache: a window as large as the dataset never replaces", "[smart]") {
  auto p = data_cache::make_plan(8, 100, 0.5);
  CATCH_CHECK(p.cache_num == 8);
  CATCH_CHECK(p.replace_num == 0);
  CATCH_CHECK(p.window(3) == identity(8));
  CATCH_CHECK(p.incoming(3).empty());
}

CATCH_TEST_CASE("smart cache: non-positive sizes and rates are refused", "[smart]") {
  for (double r : {0.0, -0.5, 1.5}) {
    CATCH_INFO(r);
    try {
      data_cache::make_plan(10, 5, r);
      CATCH_FAIL("accepted");
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::usage);
      CATCH_CHECK(std::string(e.what()) == "--replace-rate: must be in (0, 1]");
    }
  }
  CATCH_CHECK_THROWS_AS(data_cache::make_plan(10, 0, 0.5), Error);
  CATCH_CHECK_THROWS_AS(data_cache::make_plan(0, 5, 0.5), Error);
}

CATCH_TEST_CASE("smart cache: every item is visited within epochs_to_cover epochs", "[smart]") {
  for (auto [len, n, r] : {std::tuple<int64_t, int64_t, double>{25, 10, 0.15}, {100, 7, 0.3}, {9, 4, 1.0}}) {
    auto p = data_cache::make_plan(len, n, r);
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

CATCH_TEST_CASE("smart cache: the window's items come from the slab, keyed and replaced in place", "[smart]") {
  test::ShmPrefix prefix("tcunit-sc");
  auto plan = data_cache::make_plan(30, 8, 0.25);  // R = 2, 10 slots
  std::vector<int64_t> order = identity(30);
  std::reverse(order.begin(), order.end());  // a non-trivial dataset order
  std::atomic<int> calls{0};
  auto cache = data_cache::WindowCache::open(options(plan, order, "win"), preparer(&calls));
  CATCH_CHECK(slab::Slab::attach("win", false).info().slots == 10);
  for (int64_t e = 0; e < 12; ++e) {
    auto b = cache->begin_epoch(e, true, true);
    CATCH_CHECK(b.epoch == e);
    CATCH_CHECK(b.late == (e == 0 ? 8u : 0u));  // the replacer waited on had two items to spare
    std::vector<int64_t> keys;
    for (int64_t k = plan.first_key(e); k < plan.first_key(e) + 8; ++k) keys.push_back(k);
    std::vector<int32_t> got(8 * 4);
    CATCH_REQUIRE(cache->lookup(keys, got.data()).empty());
    for (std::size_t j = 0; j < keys.size(); ++j) {
      CATCH_CHECK(cache->item_of(keys[j]) == order[static_cast<std::size_t>(plan.window(e)[j])]);
      CATCH_CHECK(std::vector<int32_t>(got.begin() + 4 * j, got.begin() + 4 * j + 4) == item(cache->item_of(keys[j])));
    }
    // The replacer stores the two incoming keys in the slots of the two that left at this boundary.
    const auto want = static_cast<uint64_t>(8 + 2 * (e + 1));
    for (int i = 0; i < 500 && cache->stats().replaced < want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CATCH_REQUIRE(cache->stats().replaced == want);
    if (e >= 1) CATCH_CHECK(cache->lookup({plan.first_key(e) - 1}, got.data()) == std::vector<std::size_t>{0});
  }
  auto st = cache->stats();
  CATCH_CHECK(st.hits == 12 * 8);
  CATCH_CHECK(st.misses == 11);
  CATCH_CHECK(st.replaced == 8u + 12 * 2);  // window 0, then R per epoch (the last epoch's too)
  CATCH_CHECK(calls == 8 + 12 * 2);
  cache.reset();
  CATCH_CHECK(slab::list_slabs().empty());  // the creator removes its slab
}

CATCH_TEST_CASE("smart cache: a late replacer costs misses, never wrong bytes", "[smart]") {
  test::ShmPrefix prefix("tcunit-sc");
  auto plan = data_cache::make_plan(40, 10, 0.5);  // R = 5, 15 slots
  std::atomic<int> calls{0};
  auto cache = data_cache::WindowCache::open(options(plan, identity(40), "late"), preparer(&calls, -1, 30));
  auto b = cache->begin_epoch(0, false, true);
  CATCH_CHECK(b.late == 10);
  CATCH_CHECK(b.wait_seconds == 0);
  // The training asks before the replacer is done: it prepares the misses itself and stores them.
  std::vector<int64_t> keys = identity(10);
  std::vector<int32_t> got(10 * 4);
  auto miss = cache->lookup(keys, got.data());
  for (auto j : miss) {
    auto v = item(keys[j]);
    cache->store(keys[j], v.data());
  }
  CATCH_REQUIRE(cache->lookup(keys, got.data()).empty());
  for (int64_t k = 0; k < 10; ++k)
    CATCH_CHECK(std::vector<int32_t>(got.begin() + 4 * k, got.begin() + 4 * k + 4) == item(k));
  // Slot 3 holds key 3: a stale store of the older key 3 - 15 (negative: none) or a later one's
  // data under the wrong key cannot replace it; key 18 (the same slot, later) may.
  auto slab = slab::Slab::attach("late", true);
  auto v18 = item(18);
  CATCH_CHECK(!slab.set_tagged(3, 4, v18.data(), 16));  // same tag: already filled
  CATCH_CHECK(slab.tag(3) == 4);
  CATCH_CHECK(slab.set_tagged(3, 19, v18.data(), 16));
  CATCH_CHECK(!slab.set_tagged(3, 4, item(3).data(), 16));  // an older key never replaces a newer one
  CATCH_CHECK(cache->lookup({3}, got.data()) == std::vector<std::size_t>{0});
  CATCH_CHECK(cache->lookup({18}, got.data()).empty());
  CATCH_CHECK(std::vector<int32_t>(got.begin(), got.begin() + 4) == v18);
}

CATCH_TEST_CASE("smart cache: two processes' shares fill one slab", "[smart]") {
  test::ShmPrefix prefix("tcunit-sc");
  auto plan = data_cache::make_plan(64, 16, 0.25);
  std::atomic<int> calls0{0}, calls1{0};
  auto o0 = options(plan, identity(64), "shared");
  auto o1 = o0;
  o0.parts = o1.parts = 2;
  o1.part = 1;
  auto a = data_cache::WindowCache::open(o0, preparer(&calls0));
  auto b = data_cache::WindowCache::open(o1, preparer(&calls1));  // attaches
  a->begin_epoch(0, true, false);
  b->begin_epoch(0, true, false);
  CATCH_CHECK(calls0 == 8);
  CATCH_CHECK(calls1 == 8);
  std::vector<int32_t> got(16 * 4);
  CATCH_CHECK(b->lookup(identity(16), got.data()).empty());
  CATCH_CHECK(a->begin_epoch(1, false, false).late == 4);  // R new items, prepared by nobody yet
  // Another content id under the same name is refused.
  auto other = options(plan, identity(64), "shared");
  other.content_id = "test:other";
  CATCH_CHECK(test::code_of([&] { data_cache::WindowCache::open(other, preparer(&calls0)); }) == Exit::data);
}

CATCH_TEST_CASE("smart cache: shutdown with a slow replacer does not wait for the queue", "[smart]") {
  test::ShmPrefix prefix("tcunit-sc");
  std::atomic<int> calls{0};
  auto plan = data_cache::make_plan(1000, 200, 1.0);
  auto o = options(plan, identity(1000), "slow");
  o.chunk = 1;
  o.workers = 2;
  auto cache = data_cache::WindowCache::open(o, preparer(&calls, -1, 100));
  cache->begin_epoch(0, false, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t = std::chrono::steady_clock::now();
  cache->shutdown();  // the replacer holds at most two slow items in progress
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  CATCH_CHECK(s < 2.0);  // a liveness bound, not a speed target: the whole queue would take 20 s
  CATCH_CHECK(calls <= 4);
  cache->shutdown();  // idempotent
  auto slab = slab::Slab::attach("slow", false);
  CATCH_CHECK(slab.counts().writing == 0);  // nothing left half-written
  CATCH_CHECK(slab.counts().filled == static_cast<uint64_t>(calls.load()));
}

CATCH_TEST_CASE("smart cache: a failing prepare surfaces at the epoch boundary", "[smart]") {
  test::ShmPrefix prefix("tcunit-sc");
  auto plan = data_cache::make_plan(20, 5, 0.2);
  std::atomic<int> calls{0};
  auto cache = data_cache::WindowCache::open(options(plan, identity(20), "fail"), preparer(&calls, 6));
  CATCH_CHECK_NOTHROW(cache->begin_epoch(0, true, true));  // window 0-4, then item 5
  CATCH_CHECK_NOTHROW(cache->begin_epoch(1, true, true));  // item 5 was ready; item 6 fails
  CATCH_CHECK_THROWS_WITH(cache->begin_epoch(2, true, true), "item 6: read error");
}
