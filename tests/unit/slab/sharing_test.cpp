#include "traincache/slab/sharing.h"

#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "catch.h"
#include "slab/shm_prefix.h"
#include "test_util.h"
#include "traincache/base/error.h"

using namespace traincache;

namespace {

slab::CreateOptions rows(const std::string& name) {
  slab::CreateOptions o;
  o.name = name;
  o.length = 8;
  o.dims = {4};
  o.slots = 8;
  o.dtype = DType::f32;
  o.content_id = "rows-of-a";
  return o;
}

slab::Sharing sharing() {
  slab::Sharing s;
  s.owner_hint = "another --x name";
  s.holds_other = "holds other rows";
  return s;
}

}  // namespace

CATCH_TEST_CASE("sharing: the first process creates the slab, the others attach to it", "[slab]") {
  test::ShmPrefix prefix("tcshare");
  bool created = false;
  auto first = slab::open_shared(rows("a"), sharing(), &created);
  CATCH_CHECK(created);
  const float one[4] = {1, 2, 3, 4};
  CATCH_REQUIRE(first->set(3, one, sizeof one));
  auto second = slab::open_shared(rows("a"), sharing(), &created);
  CATCH_CHECK_FALSE(created);
  auto v = second->view(3);
  CATCH_REQUIRE(v);
  CATCH_CHECK(static_cast<const float*>(v.data)[3] == 4.0f);
  int before = 0;
  auto third = slab::open_shared(rows("b"), sharing(), &created, [&] { ++before; });
  CATCH_CHECK(created);
  CATCH_CHECK(before == 1);
  // A refusal before creating (a space check) leaves no slab behind.
  CATCH_CHECK(test::message_of([] {
                bool c = false;
                slab::open_shared(rows("c"), sharing(), &c, [] { throw Error(Exit::cant_create, "--x", "no space"); });
              }) == "--x: no space");
  const auto names = slab::list_slabs();
  CATCH_CHECK(std::set<std::string>(names.begin(), names.end()) == std::set<std::string>{"a", "b"});
}

CATCH_TEST_CASE("sharing: a slab made for other contents or of another shape is refused", "[slab]") {
  test::ShmPrefix prefix("tcshare");
  bool created = false;
  auto made = slab::open_shared(rows("a"), sharing(), &created);
  auto refusal = [](const slab::CreateOptions& want, const slab::Sharing& s) {
    return test::message_of([&] {
      bool c = false;
      slab::open_shared(want, s, &c);
    });
  };
  auto other = rows("a");
  other.content_id = "rows-of-b";
  CATCH_CHECK(refusal(other, sharing()) == "a: holds other rows");
  auto wide = rows("a");
  wide.dims = {5};
  CATCH_CHECK(refusal(wide, sharing()) == "a: holds other rows");
  auto shaped = sharing();
  shaped.wrong_shape = "not this shape";
  CATCH_CHECK(refusal(wide, shaped) == "a: not this shape");
  auto longer = rows("a");
  longer.length = 9;
  CATCH_CHECK(refusal(longer, shaped) == "a: not this shape");
  auto doubles = rows("a");
  doubles.dtype = DType::f64;
  CATCH_CHECK(refusal(doubles, shaped) == "a: not this shape");
  auto hashed = rows("a");
  hashed.selection = slab::Selection::hashed;
  CATCH_CHECK(refusal(hashed, shaped) == "a: not this shape");
  // Fewer slots: a part of the rows, taken as it is unless a full copy is wanted.
  auto part = rows("a");
  part.slots = 4;
  CATCH_CHECK(refusal(part, shaped).empty());
  shaped.same_slots = true;
  CATCH_CHECK(refusal(part, shaped) == "a: not this shape");
  CATCH_CHECK(refusal(rows("a"), shaped).empty());
}

CATCH_TEST_CASE("sharing: a caller may word the refusal from what the slab holds", "[slab]") {
  test::ShmPrefix prefix("tcshare");
  bool created = false;
  auto made = slab::open_shared(rows("a"), sharing(), &created);
  auto s = sharing();
  s.holds_other_of = [](const slab::SlabInfo& si) { return "holds " + std::to_string(si.dims.at(0)) + " wide"; };
  auto wide = rows("a");
  wide.dims = {5};
  auto other = rows("a");
  other.content_id = "rows-of-b";
  for (const auto& want : {wide, other})
    CATCH_CHECK(test::message_of([&] {
                  bool c = false;
                  slab::open_shared(want, s, &c);
                }) == "a: holds " + std::to_string(rows("a").dims.at(0)) + " wide");
  CATCH_CHECK(test::message_of([&] {
                bool c = false;
                slab::open_shared(rows("a"), s, &c);
              }).empty());
  // The way to trust another user's slab is the caller's too.
  slab::SlabInfo si = made->info();
  si.uid = ::geteuid() + 1;
  s.trust_hint = "trust_owner=True";
  CATCH_CHECK(test::message_of([&] { slab::check_shared(si, rows("a"), s); }) ==
              "a: slab is owned by another user (uid " + std::to_string(si.uid) +
                  "); use trust_owner=True to share it, or another --x name");
}

CATCH_TEST_CASE("sharing: another user's slab is refused unless trusted", "[slab]") {
  test::ShmPrefix prefix("tcshare");
  bool created = false;
  auto slab = slab::open_shared(rows("a"), sharing(), &created);
  slab::SlabInfo si = slab->info();
  si.uid = ::geteuid() + 1;
  auto s = sharing();
  CATCH_CHECK(test::message_of([&] { slab::check_shared(si, rows("a"), s); }) ==
              "a: slab is owned by another user (uid " + std::to_string(si.uid) +
                  "); use --trust-slab-owner to share it, or another --x name");
  CATCH_CHECK(test::code_of([&] { slab::check_shared(si, rows("a"), s); }) == Exit::data);
  s.trust_owner = true;
  CATCH_CHECK(test::message_of([&] { slab::check_shared(si, rows("a"), s); }).empty());
  // A variable layout compares its element type, not a shape.
  auto tokens = rows("t");
  tokens.layout = slab::Layout::variable;
  tokens.dtype = DType::i32;
  si.uid = ::geteuid();
  si.layout = slab::Layout::variable;
  si.dtype = DType::i32;
  si.content_id = tokens.content_id;
  si.dims.clear();
  CATCH_CHECK(test::message_of([&] { slab::check_shared(si, tokens, s); }).empty());
  si.dtype = DType::i64;
  CATCH_CHECK(test::message_of([&] { slab::check_shared(si, tokens, s); }) == "t: holds other rows");
}

CATCH_TEST_CASE("sharing: a sealed slab whose data changed is refused when seals are checked", "[slab]") {
  test::ShmPrefix prefix("tcshare");
  bool created = false;
  auto slab = slab::open_shared(rows("a"), sharing(), &created);
  const float one[4] = {1, 2, 3, 4};
  for (uint64_t i = 0; i < 8; ++i) CATCH_REQUIRE(slab->set(i, one, sizeof one));
  slab->seal(slab->data_digest());
  auto sealed = sharing();
  sealed.check_seal = true;
  CATCH_CHECK(test::message_of([&] { slab::open_shared(rows("a"), sealed, &created); }).empty());
  static_cast<float*>(const_cast<void*>(slab->items()))[5] = 9;  // a stray write after sealing
  CATCH_CHECK(test::message_of([&] { slab::open_shared(rows("a"), sealed, &created); }) ==
              "a: slab changed since it was sealed (remove it: shm-cache rm a)");
  CATCH_CHECK(test::message_of([&] { slab::open_shared(rows("a"), sharing(), &created); }).empty());
}
