#include "traincache/data_cache/data_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "catch.h"
#include "slab/shm_prefix.h"
#include "test_util.h"
#include "traincache/base/error.h"
#include "traincache/slab/shm_slab.h"

using namespace traincache;

namespace {

std::vector<int32_t> row(int32_t v) { return {v, v + 1, v + 2}; }

}  // namespace

CATCH_TEST_CASE("data cache: specs", "[data_cache]") {
  CATCH_CHECK(data_cache::parse("none", "--dc").mode == data_cache::Mode::none);
  CATCH_CHECK(data_cache::parse("full", "--dc").mode == data_cache::Mode::full);
  auto s = data_cache::parse("stochastic:0.25", "--dc");
  CATCH_CHECK(s.mode == data_cache::Mode::stochastic);
  CATCH_CHECK(s.fraction == 0.25);
  auto w = data_cache::parse("smart:120,0.25", "--dc");
  CATCH_CHECK(w.mode == data_cache::Mode::smart);
  CATCH_CHECK(w.cache_num == 120);
  CATCH_CHECK(w.replace_rate == 0.25);
  for (const char* bad : {"smart:0,0.5", "smart:10", "smart:10,0", "smart:10,1.5", "smart:x,0.5", "smart:10,0.5,1"})
    CATCH_CHECK(test::code_of([&] { data_cache::parse(bad, "--dc"); }) == Exit::usage);
  for (const char* bad : {"stochastic:0", "stochastic:-1", "stochastic:1.01", "stochastic:x", "stochastic:nan", "Full"})
    CATCH_CHECK(test::code_of([&] { data_cache::parse(bad, "--dc"); }) == Exit::usage);
}

CATCH_TEST_CASE("data cache: lookups, stores, the fraction and sharing", "[data_cache]") {
  test::ShmPrefix prefix("tcunit-dc");
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
  auto names = slab::list_slabs();
  CATCH_CHECK(std::find(names.begin(), names.end(), temp) == names.end());
  CATCH_CHECK(std::find(names.begin(), names.end(), "kept") != names.end());
  // A private slab: an existing name is refused.
  auto own = data_cache::RowCache::create_own(data_cache::parse("full", "--dc"), "own", "test", 4, DType::f32, {2});
  CATCH_CHECK(test::code_of([&] {
                data_cache::RowCache::create_own(data_cache::parse("full", "--dc"), "own", "test", 4, DType::f32, {2});
              }) == Exit::cant_create);
}

CATCH_TEST_CASE("data cache: a sealed slab is made once and then attached", "[data_cache]") {
  test::ShmPrefix prefix("tcunit-dc");
  slab::CreateOptions want;
  want.name = "sealed";
  want.content_id = "test:sealed";
  want.dtype = DType::i32;
  want.temporary = true;
  int made = 0;
  auto make = [&] {
    ++made;
    data_cache::SealedItems items;
    items.count = 3;
    items.bytes = (1 + 2 + 3) * sizeof(int32_t);
    items.fill = [](slab::Slab& slab) {
      for (int32_t i = 0; i < 3; ++i) {
        std::vector<int32_t> v(static_cast<std::size_t>(i + 1), i * 10);
        slab.set(static_cast<uint64_t>(i), v.data(), v.size() * sizeof(int32_t));
      }
    };
    return items;
  };
  auto first = data_cache::SealedSlab::open(want, false, make);
  CATCH_CHECK(first->made());
  CATCH_CHECK(first->stats().stored == 3);
  auto second = data_cache::SealedSlab::open(want, false, make);  // attached: nothing made
  CATCH_CHECK(!second->made());
  CATCH_CHECK(made == 1);
  auto v = second->slab().view(2);
  CATCH_REQUIRE(v.bytes == 3 * sizeof(int32_t));
  CATCH_CHECK(static_cast<const int32_t*>(v.data)[2] == 20);
  CATCH_CHECK(second->slab().info().sealed_digest.has_value());
  // Other contents under the name are refused.
  auto other = want;
  other.content_id = "test:other";
  CATCH_CHECK(test::code_of([&] { data_cache::SealedSlab::open(other, false, make); }) == Exit::data);
  second.reset();
  first.reset();  // the maker removes its temporary slab
  CATCH_CHECK(slab::list_slabs().empty());
}

CATCH_TEST_CASE("data cache: a failed make leaves no slab and no claim; a dead maker's claim is taken over",
                "[data_cache]") {
  test::ShmPrefix prefix("tcunit-dc");
  slab::CreateOptions want;
  want.name = "failing";
  want.content_id = "test:failing";
  want.dtype = DType::i32;
  const std::string claim = slab::shm_dir() + "/." + slab::object_prefix() + "failing.claim";
  auto fail = []() -> data_cache::SealedItems { throw Error(Exit::data, "texts", "empty text"); };
  CATCH_CHECK(test::code_of([&] { data_cache::SealedSlab::open(want, false, fail); }) == Exit::data);
  CATCH_CHECK(slab::list_slabs().empty());
  CATCH_CHECK(access(claim.c_str(), F_OK) != 0);
  {
    FILE* f = std::fopen(claim.c_str(), "w");
    CATCH_REQUIRE(f);
    std::fputs("999999999", f);  // no such process
    std::fclose(f);
  }
  auto make = [] {
    data_cache::SealedItems items;
    items.count = 1;
    items.bytes = 4;
    items.fill = [](slab::Slab& slab) {
      int32_t x = 7;
      slab.set(0, &x, 4);
    };
    return items;
  };
  auto s = data_cache::SealedSlab::open(want, false, make);
  CATCH_CHECK(s->made());
  CATCH_CHECK(access(claim.c_str(), F_OK) != 0);
  s.reset();
  slab::remove_slab("failing");  // not temporary
}
