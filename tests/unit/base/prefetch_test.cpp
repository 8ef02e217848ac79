#include "traincache/base/prefetch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"

using namespace traincache;

namespace {
// A delay that makes later items finish before earlier ones now and then.
void jitter(int64_t k) { std::this_thread::sleep_for(std::chrono::microseconds((k * 7919) % 5 * 200)); }
}  // namespace

CATCH_TEST_CASE("prefetch: items come out in order whatever the workers' timing", "[prefetch]") {
  for (int workers : {1, 3, 8}) {
    CATCH_INFO("workers " << workers);
    OrderedPrefetcher<int64_t> pf(200, workers, 5, [](int64_t k) {
      jitter(k);
      return k * k;
    });
    CATCH_CHECK(pf.count() == 200);
    for (int64_t k = 0; k < 200; ++k) CATCH_REQUIRE(pf.next() == k * k);
  }
}

CATCH_TEST_CASE("prefetch: never more than depth items ahead of the consumer", "[prefetch]") {
  std::atomic<int64_t> highest{-1};
  std::atomic<int64_t> taken{0};
  std::atomic<bool> too_far{false};
  OrderedPrefetcher<int64_t> pf(100, 4, 6, [&](int64_t k) {
    if (k >= taken + 6) too_far = true;
    int64_t h = highest;
    while (k > h && !highest.compare_exchange_weak(h, k)) {
    }
    return k;
  });
  for (int64_t k = 0; k < 100; ++k) {
    if (k % 10 == 0) {
      // The workers run ahead as far as they may (waiting up to 2 s for them), and no further.
      const int64_t limit = std::min<int64_t>(99, k + 5);
      for (int i = 0; i < 2000 && highest < limit; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      CATCH_CHECK(highest == limit);
    }
    taken = k + 1;  // before next(): the prefetcher counts item k as taken inside it
    CATCH_REQUIRE(pf.next() == k);
  }
  CATCH_CHECK_FALSE(too_far);
}

CATCH_TEST_CASE("prefetch: a worker's error reaches the consumer after the items before it", "[prefetch]") {
  OrderedPrefetcher<std::string> pf(50, 2, 4, [](int64_t k) -> std::string {
    if (k == 3) throw std::runtime_error("bad item 3");
    return std::to_string(k);
  });
  CATCH_CHECK(pf.next() == "0");
  CATCH_CHECK(pf.next() == "1");
  CATCH_CHECK(pf.next() == "2");
  CATCH_CHECK_THROWS_WITH(pf.next(), "bad item 3");
  CATCH_CHECK_THROWS_WITH(pf.next(), "bad item 3");
}

CATCH_TEST_CASE("prefetch: destroying it early stops the workers", "[prefetch]") {
  std::atomic<int64_t> produced{0};
  {
    OrderedPrefetcher<int64_t> pf(1000000, 4, 8, [&](int64_t k) {
      ++produced;
      return k;
    });
    CATCH_CHECK(pf.next() == 0);
  }  // joins here: would hang if a worker waited for the consumer forever
  CATCH_CHECK(produced <= 1 + 8 + 4);
}

CATCH_TEST_CASE("serial worker: tasks run one at a time in submission order, all before drain returns", "[prefetch]") {
  std::vector<int> ran;
  std::atomic<int> running{0}, most{0};
  SerialWorker w(2);
  for (int k = 0; k < 40; ++k)
    w.submit([&, k] {
      most = std::max(most.load(), ++running);
      jitter(k);
      ran.push_back(k);
      --running;
    });
  w.drain();
  CATCH_REQUIRE(ran.size() == 40);
  for (int k = 0; k < 40; ++k) CATCH_CHECK(ran[static_cast<std::size_t>(k)] == k);
  CATCH_CHECK(most.load() == 1);
}

CATCH_TEST_CASE("serial worker: never more than depth tasks wait", "[prefetch]") {
  std::atomic<bool> release{false};
  std::atomic<int> submitted{0};
  SerialWorker w(2);
  std::thread producer([&] {
    for (int k = 0; k < 6; ++k) {
      w.submit([&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      ++submitted;
    }
  });
  // One task runs (blocked), two wait: the fourth submit blocks.
  for (int i = 0; i < 5000 && submitted.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CATCH_CHECK(submitted.load() == 3);
  release = true;
  producer.join();
  w.drain();
  CATCH_CHECK(submitted.load() == 6);
}

CATCH_TEST_CASE("serial worker: the first error reaches submit and drain; later tasks do not run", "[prefetch]") {
  std::vector<int> ran;
  SerialWorker w(8);
  w.submit([&] { ran.push_back(0); });
  w.submit([] { throw std::runtime_error("disk full"); });
  w.submit([&] { ran.push_back(2); });
  CATCH_CHECK_THROWS_WITH(w.drain(), "disk full");
  CATCH_CHECK_THROWS_WITH(w.submit([&] { ran.push_back(3); }), "disk full");
  CATCH_CHECK(ran == std::vector<int>{0});
}

CATCH_TEST_CASE("serial worker: destruction waits for the tasks submitted", "[prefetch]") {
  std::atomic<int> ran{0};
  {
    SerialWorker w(4);
    for (int k = 0; k < 4; ++k)
      w.submit([&, k] {
        jitter(k + 1);
        ++ran;
      });
  }
  CATCH_CHECK(ran.load() == 4);
}
