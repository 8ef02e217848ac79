#include "traincache/data_cache.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

#include "test_util.h"
#include "traincache/error.h"
#include "traincache/shm_slab.h"

using namespace traincache;

namespace {

struct Prefix {
  Prefix() { setenv("TRAINCACHE_SHM_PREFIX", ("tcunit-dc-" + std::to_string(getpid()) + "-").c_str(), 1); }
  ~Prefix() {
    for (const auto& n : shm::list_slabs()) shm::remove_slab(n);
  }
};

std::vector<int32_t> row(int32_t v) { return {v, v + 1, v + 2}; }

}  // namespace

CATCH_TEST_CASE("data cache: specs", "[data_cache]") {
  CATCH_CHECK(data_cache::parse("none", "--dc").mode == data_cache::Mode::none);
  CATCH_CHECK(data_cache::parse("full", "--dc").mode == data_cache::Mode::full);
  auto s = data_cache::parse("stochastic:0.25", "--dc");
  CATCH_CHECK(s.mode == data_cache::Mode::stochastic);
  CATCH_CHECK(s.fraction == 0.25);
  for (const char* bad : {"stochastic:0", "stochastic:-1", "stochastic:1.01", "stochastic:x", "stochastic:nan", "Full"})
    CATCH_CHECK(test::code_of([&] { data_cache::parse(bad, "--dc"); }) == Exit::usage);
}

CATCH_TEST_CASE("data cache: lookups, stores, the fraction and sharing", "[data_cache]") {
  Prefix prefix;
  data_cache::Spec spec = data_cache::parse("stochastic:0.5", "--dc");
  // 10 rows of 3 int32: the first 5 are cacheable.
  auto a = data_cache::RowCache::open(spec, data_cache::content_id("x"), 10, DType::i32, {3}, false);
  CATCH_REQUIRE(a);
  CATCH_CHECK(a->row_bytes() == 12);
  std::vector<int32_t> out(3 * 4, -1);
  CATCH_CHECK(a->lookup({7, 1, 4, 9}, out.data()) == std::vector<std::size_t>{0, 1, 2, 3});
  for (int64_t r : {7, 1, 4, 9}) a->store(r, row(static_cast<int32_t>(10 * r)).data());
  // Rows 1 and 4 were stored; 7 and 9 are beyond the fraction.
  CATCH_CHECK(a->lookup({9, 4, 1, 7}, out.data()) == std::vector<std::size_t>{0, 3});
  CATCH_CHECK(std::vector<int32_t>(out.begin() + 3, out.begin() + 9) == std::vector<int32_t>{40, 41, 42, 10, 11, 12});
  // A second opening for the same content attaches to the same slab and sees the rows.
  auto b = data_cache::RowCache::open(spec, data_cache::content_id("x"), 10, DType::i32, {3}, false);
  CATCH_CHECK(b->lookup({1}, out.data()).empty());
  CATCH_CHECK(out[0] == 10);
  b->store(1, row(99).data());  // filled already: nothing changes
  CATCH_CHECK(a->lookup({1}, out.data()).empty());
  CATCH_CHECK(out[0] == 10);
  auto st = a->stats();
  CATCH_CHECK(st.hits == 3);
  CATCH_CHECK(st.misses == 6);
  CATCH_CHECK(st.stored == 2);
  CATCH_CHECK(st.slots == 5);
  CATCH_CHECK(b->stats().stored == 0);
  CATCH_CHECK(a->filled_bytes() == 24);
  // Other content under the same kept name: refused.
  spec.keep = "kept";
  auto k = data_cache::RowCache::open(spec, data_cache::content_id("x"), 10, DType::i32, {3}, false);
  CATCH_CHECK(test::message_of([&] {
                data_cache::RowCache::open(spec, data_cache::content_id("y"), 10, DType::i32, {3}, false);
              }) == "kept: slab holds other rows than this run's data (remove it: shm-cache rm kept)");
  // The temporary slab goes with its creator; the kept one stays.
  const std::string temp = a->stats().slabs.at(0);
  b.reset();
  a.reset();
  k.reset();
  auto names = shm::list_slabs();
  CATCH_CHECK(std::find(names.begin(), names.end(), temp) == names.end());
  CATCH_CHECK(std::find(names.begin(), names.end(), "kept") != names.end());
  // A private slab: an existing name is refused.
  auto own = data_cache::RowCache::create_own(data_cache::parse("full", "--dc"), "own", "test", 4, DType::f32, {2});
  CATCH_CHECK(test::code_of([&] {
                data_cache::RowCache::create_own(data_cache::parse("full", "--dc"), "own", "test", 4, DType::f32, {2});
              }) == Exit::cant_create);
}
