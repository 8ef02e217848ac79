#include "traincache/slab/shm_slab.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "catch.h"
#include "slab/shm_prefix.h"
#include "test_util.h"
#include "traincache/base/error.h"

using namespace traincache;
using test::code_of;

namespace {

slab::CreateOptions fixed(const std::string& name, uint64_t len, std::vector<uint64_t> dims, uint64_t slots,
                          DType dt = DType::u8) {
  slab::CreateOptions o;
  o.name = name;
  o.length = len;
  o.dims = std::move(dims);
  o.slots = slots;
  o.dtype = dt;
  return o;
}

slab::CreateOptions variable(const std::string& name, uint64_t len, DType dt, uint64_t arena_bytes) {
  slab::CreateOptions o;
  o.name = name;
  o.length = len;
  o.layout = slab::Layout::variable;
  o.dtype = dt;
  o.limit_bytes = arena_bytes;
  return o;
}

std::vector<unsigned char> item(uint64_t index, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>((index * 131 + i * 7) & 0xff);
  return v;
}

}  // namespace

CATCH_TEST_CASE("shm slab: the header round-trips through attach", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto o = fixed("hdr", 100, {1, 28, 28}, 40);
  o.mode = 0640;
  { slab::Slab::create(o); }
  auto s = slab::Slab::attach("hdr");
  auto i = s.info();
  CATCH_CHECK(i.layout == slab::Layout::fixed);
  CATCH_CHECK(i.dtype == DType::u8);
  CATCH_CHECK(i.dims == std::vector<uint64_t>{1, 28, 28});
  CATCH_CHECK(i.length == 100);
  CATCH_CHECK(i.slots == 40);
  CATCH_CHECK(i.item_bytes == 784);
  CATCH_CHECK(i.mode == 0640);
  CATCH_CHECK(i.creator.find("pid " + std::to_string(getpid())) != std::string::npos);
  CATCH_CHECK(i.data_offset % 64 == 0);
  CATCH_CHECK(i.total_bytes == i.data_offset + 40 * 784);
  auto c = s.counts();
  CATCH_CHECK(c.empty == 40);
  CATCH_CHECK(c.filled == 0);
}

CATCH_TEST_CASE("shm slab: every dtype stores and returns its bytes", "[shm]") {
  test::ShmPrefix p("tcunit");
  for (DType t : {DType::u8, DType::i8, DType::u16, DType::i16, DType::u32, DType::i32, DType::u64, DType::i64,
                  DType::f16, DType::f32, DType::f64}) {
    CATCH_INFO(dtype_name(t));
    std::string name = std::string("dt-") + dtype_name(t);
    auto s = slab::Slab::create(fixed(name, 4, {3}, 4, t));
    auto v = item(2, 3 * dtype_size(t));
    CATCH_CHECK(s.set(2, v.data(), v.size()));
    std::vector<unsigned char> out;
    CATCH_CHECK(s.get(2, out));
    CATCH_CHECK(out == v);
    CATCH_CHECK_FALSE(s.set(1, v.data(), v.size() - 1));  // wrong size: a no-op
    CATCH_CHECK(s.state(1) == slab::SlotState::empty);
  }
}

CATCH_TEST_CASE("shm slab: gets and sets outside the cacheable range are misses and no-ops", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("range", 10, {4}, 6));
  auto v = item(7, 4);
  CATCH_CHECK_FALSE(s.set(7, v.data(), 4));   // index 7 >= 6 slots
  CATCH_CHECK_FALSE(s.set(10, v.data(), 4));  // beyond the dataset
  CATCH_CHECK_FALSE(s.view(7));
  CATCH_CHECK_FALSE(s.view(3));  // empty slot
  CATCH_CHECK(s.set(3, v.data(), 4));
  auto w = item(8, 4);
  CATCH_CHECK_FALSE(s.set(3, w.data(), 4));  // filled slots are never overwritten
  std::vector<unsigned char> out;
  CATCH_CHECK(s.get(3, out));
  CATCH_CHECK(out == v);
}

CATCH_TEST_CASE("shm slab: a hashed selection caches exactly `slots` indices, fixed by the seed", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto o = fixed("hash1", 1000, {1}, 250);
  o.selection = slab::Selection::hashed;
  o.seed = 5;
  auto a = slab::Slab::create(o);
  o.name = "hash2";
  auto b = slab::Slab::create(o);
  o.name = "hash3";
  o.seed = 6;
  auto c = slab::Slab::create(o);
  int n = 0, same = 0, other = 0;
  std::vector<bool> seen(250, false);
  for (uint64_t i = 0; i < 1000; ++i) {
    auto sa = a.slot_of(i);
    if (sa) {
      ++n;
      CATCH_REQUIRE(*sa < 250);
      CATCH_CHECK_FALSE(seen[*sa]);
      seen[*sa] = true;
    }
    same += sa == b.slot_of(i);
    other += bool(sa) != bool(c.slot_of(i));
  }
  CATCH_CHECK(n == 250);
  CATCH_CHECK(same == 1000);
  CATCH_CHECK(other > 0);
}

CATCH_TEST_CASE("shm slab: variable-size items share an arena; a full arena refuses without claiming", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(variable("var", 10, DType::i64, 100));
  auto a = item(0, 40), b = item(1, 8), c = item(2, 60);
  CATCH_CHECK(s.set(0, a.data(), a.size()));
  CATCH_CHECK(s.set(1, b.data(), b.size()));
  CATCH_CHECK_FALSE(s.set(2, c.data(), c.size()));  // 48 + 60 > 100
  CATCH_CHECK(s.state(2) == slab::SlotState::empty);
  std::vector<unsigned char> out;
  CATCH_CHECK(s.get(1, out));
  CATCH_CHECK(out == b);
  CATCH_CHECK(s.get(0, out));
  CATCH_CHECK(out == a);
  CATCH_CHECK(s.counts().filled_bytes == 48);
}

CATCH_TEST_CASE("shm slab: begin_write hands out the item's place, commit publishes it, abort gives it back", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("split", 8, {16}, 6));
  const auto info = s.info();
  auto off = s.begin_write(2, 16);
  CATCH_REQUIRE(off);
  CATCH_CHECK(*off == info.data_offset + 2 * 16);
  CATCH_CHECK(s.state(2) == slab::SlotState::writing);
  CATCH_CHECK_FALSE(s.view(2));             // a miss until committed
  CATCH_CHECK_FALSE(s.begin_write(2, 16));  // claimed once
  auto v = item(2, 16);
  std::memcpy(static_cast<char*>(const_cast<void*>(s.items())) + 2 * 16, v.data(), 16);
  CATCH_CHECK(s.commit(2));
  CATCH_CHECK_FALSE(s.commit(2));  // no longer WRITING
  CATCH_CHECK_FALSE(s.abort(2));   // a filled slot stays filled
  std::vector<unsigned char> out;
  CATCH_CHECK(s.get(2, out));
  CATCH_CHECK(out == v);
  // Abort returns the slot to empty; the item can be written again.
  CATCH_REQUIRE(s.begin_write(3, 16));
  CATCH_CHECK(s.abort(3));
  CATCH_CHECK(s.state(3) == slab::SlotState::empty);
  CATCH_CHECK(s.set(3, v.data(), 16));
  // Nothing to commit or abort: an empty slot, a slot past the cacheable range, a wrong size.
  CATCH_CHECK_FALSE(s.commit(4));
  CATCH_CHECK_FALSE(s.abort(4));
  CATCH_CHECK_FALSE(s.begin_write(6, 16));
  CATCH_CHECK_FALSE(s.begin_write(4, 15));
  CATCH_CHECK(s.state(4) == slab::SlotState::empty);
  // Another process cannot publish or give back this process's claim.
  CATCH_REQUIRE(s.begin_write(5, 16));
  pid_t pid = fork();
  if (pid == 0) {
    auto child = slab::Slab::attach("split");
    _exit(child.commit(5) || child.abort(5) ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CATCH_CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CATCH_CHECK(s.state(5) == slab::SlotState::writing);
  CATCH_CHECK(s.commit(5));
}

CATCH_TEST_CASE("shm slab: begin_write in a variable layout reserves arena bytes and records them", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(variable("varsplit", 4, DType::i32, 64));
  const auto info = s.info();
  auto a = s.begin_write(1, 24);
  CATCH_REQUIRE(a);
  CATCH_CHECK(*a == info.data_offset);
  auto b = s.begin_write(0, 40);
  CATCH_REQUIRE(b);
  CATCH_CHECK(*b == info.data_offset + 24);
  CATCH_CHECK_FALSE(s.begin_write(2, 1));  // the arena is full: nothing claimed
  CATCH_CHECK(s.state(2) == slab::SlotState::empty);
  CATCH_CHECK(s.abort(1));  // its 24 bytes are not reused
  CATCH_CHECK_FALSE(s.begin_write(1, 8));
  CATCH_CHECK(s.commit(0));
  auto view = s.view(0);
  CATCH_CHECK(view.bytes == 40);
  CATCH_CHECK(static_cast<const char*>(view.data) == static_cast<const char*>(s.items()) + 24);
}

CATCH_TEST_CASE("shm slab: a writer killed inside a write leaves a miss, and repair recovers the slot", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("crash", 8, {16}, 8));
  pid_t pid = fork();
  if (pid == 0) {
    auto child = slab::Slab::attach("crash");
    child.begin_write(5, 16);  // claimed, never published
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CATCH_REQUIRE(WIFSIGNALED(status));
  CATCH_CHECK(s.state(5) == slab::SlotState::writing);
  CATCH_CHECK_FALSE(s.view(5));
  CATCH_CHECK(s.counts().writing == 1);
  CATCH_CHECK(s.counts().filled == 0);
  auto v = item(5, 16);
  CATCH_CHECK_FALSE(s.set(5, v.data(), 16));  // still claimed
  CATCH_CHECK(s.repair() == 1);
  CATCH_CHECK(s.state(5) == slab::SlotState::empty);
  CATCH_CHECK(s.set(5, v.data(), 16));
  std::vector<unsigned char> out;
  CATCH_CHECK(s.get(5, out));
  CATCH_CHECK(out == v);
  // A live writer's slot is left alone.
  CATCH_CHECK(s.begin_write(6, 16));
  CATCH_CHECK(s.repair() == 0);
}

CATCH_TEST_CASE("shm slab: 4 processes filling overlapping rows leave every slot byte-identical", "[shm]") {
  test::ShmPrefix p("tcunit");
  const uint64_t n = 4000, bytes = 256;
  { slab::Slab::create(fixed("race", n, {bytes}, n)); }
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    pid_t pid = fork();
    if (pid == 0) {
      auto s = slab::Slab::attach("race");
      // Overlapping ranges, in different orders.
      uint64_t lo = k * n / 8, hi = std::min<uint64_t>(n, lo + n * 5 / 8);
      for (uint64_t i = 0; i < hi - lo; ++i) {
        uint64_t idx = k % 2 ? hi - 1 - i : lo + i;
        auto v = item(idx, bytes);
        s.set(idx, v.data(), bytes);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) waitpid(pid, nullptr, 0);
  auto s = slab::Slab::attach("race", false);
  uint64_t filled = 0, bad = 0;
  std::vector<unsigned char> out;
  for (uint64_t i = 0; i < n; ++i)
    if (s.get(i, out)) {
      ++filled;
      bad += out != item(i, bytes);
    }
  CATCH_CHECK(bad == 0);
  CATCH_CHECK(filled == n);  // the ranges cover [0, n)
  CATCH_CHECK(s.counts().writing == 0);
}

CATCH_TEST_CASE("shm slab: truncated and foreign objects are refused as bad data", "[shm]") {
  test::ShmPrefix p("tcunit");
  { slab::Slab::create(fixed("trunc", 10, {100}, 10)); }
  std::string path = slab::shm_dir() + "/" + slab::object_prefix() + "trunc";
  CATCH_REQUIRE(truncate(path.c_str(), 5000) == 0);
  CATCH_CHECK(code_of([] { slab::Slab::attach("trunc"); }) == Exit::data);
  std::string foreign = slab::shm_dir() + "/" + slab::object_prefix() + "foreign";
  int fd = open(foreign.c_str(), O_CREAT | O_WRONLY, 0600);
  std::vector<char> junk(8192, 'x');
  CATCH_REQUIRE(write(fd, junk.data(), junk.size()) == 8192);
  close(fd);
  try {
    slab::Slab::attach("foreign");
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::data);
    CATCH_CHECK(std::string(e.what()) == "foreign: not a traincache slab (bad magic)");
  }
  CATCH_CHECK(code_of([] { slab::Slab::attach("absent"); }) == Exit::unavailable);
}

CATCH_TEST_CASE("shm slab: a slab larger than free /dev/shm is refused before anything is written", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto o = fixed("huge", 1ull << 20, {1ull << 20}, 1ull << 20);  // 1 TiB
  try {
    slab::Slab::create(o);
    CATCH_FAIL("created");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::cant_create);
    std::string msg = e.what();
    CATCH_CHECK(msg.rfind("huge: needs 1024.", 0) == 0);
    CATCH_CHECK(msg.find(" GiB but /dev/shm has ") != std::string::npos);
  }
  CATCH_CHECK(slab::list_slabs().empty());
}

CATCH_TEST_CASE("shm slab: names are checked, existing names are not reused", "[shm]") {
  test::ShmPrefix p("tcunit");
  for (const char* bad : {"", ".", "..", "../x", "a/b", "a b", "ü"})
    CATCH_CHECK(code_of([&] { slab::validate_name(bad); }) == Exit::usage);
  slab::validate_name("fashion-mnist_v1.2");
  { slab::Slab::create(fixed("dup", 2, {1}, 2)); }
  CATCH_CHECK(code_of([] { slab::Slab::create(fixed("dup", 2, {1}, 2)); }) == Exit::cant_create);
}

CATCH_TEST_CASE("shm slab: sizes parse with binary and decimal units", "[shm]") {
  CATCH_CHECK(slab::parse_size("2GiB") == 2ull << 30);
  CATCH_CHECK(slab::parse_size("512MiB") == 512ull << 20);
  CATCH_CHECK(slab::parse_size("1.5G") == 3ull << 29);
  CATCH_CHECK(slab::parse_size("1000") == 1000);
  CATCH_CHECK(slab::parse_size("3MB") == 3000000);
  CATCH_CHECK(code_of([] { slab::parse_size("lots"); }) == Exit::usage);
  CATCH_CHECK(code_of([] { slab::parse_size("5XB"); }) == Exit::usage);
  // Between 2^63 and 2^64: llround overflowed here; now exact or refused.
  CATCH_CHECK(slab::parse_size("10000000000000000000") == 10000000000000000000ull);
  CATCH_CHECK(slab::parse_size("15TiB") == 15ull << 40);
  CATCH_CHECK(code_of([] { slab::parse_size("18446744073709551616"); }) == Exit::usage);
  CATCH_CHECK(code_of([] { slab::parse_size("20000000TB"); }) == Exit::usage);
}

CATCH_TEST_CASE("shm slab: a reader of a slab truncated under it exits 74 instead of dying of SIGBUS", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("trunc", 4096, {1024}, 4096));
  std::vector<unsigned char> v(1024, 7);
  for (uint64_t i = 0; i < 4096; ++i) CATCH_REQUIRE(s.set(i, v.data(), v.size()));
  const std::string path = s.info().path;
  pid_t child = fork();
  if (child == 0) {
    slab::install_sigbus_handler("unit");
    auto r = slab::Slab::attach("trunc", false);
    int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0 || ftruncate(fd, 4096) != 0) _exit(3);  // only the header page is left
    volatile unsigned char sum = 0;
    for (uint64_t i = 0; i < 4096; ++i) sum += static_cast<const unsigned char*>(r.items())[i * 1024];
    _exit(sum == 0 ? 4 : 5);  // never reached: the first read past the end raises SIGBUS
  }
  int status = 0;
  waitpid(child, &status, 0);
  CATCH_REQUIRE(WIFEXITED(status));
  CATCH_CHECK(WEXITSTATUS(status) == 74);
}

CATCH_TEST_CASE("shm slab: check_size reports an object truncated after attach", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("trunc2", 64, {64}, 64));
  auto r = slab::Slab::attach("trunc2", false);
  CATCH_CHECK(code_of([&] { r.check_size(); }) == Exit::ok);
  CATCH_REQUIRE(truncate(s.info().path.c_str(), 4096) == 0);
  CATCH_CHECK(code_of([&] { r.check_size(); }) == Exit::io);
}

CATCH_TEST_CASE("shm slab: invalid slot states are counted, missed by readers and reset by repair", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto s = slab::Slab::create(fixed("inv", 8, {4}, 8));
  auto v = item(2, 4);
  CATCH_REQUIRE(s.set(2, v.data(), v.size()));
  auto i = s.info();
  int fd = ::open(i.path.c_str(), O_RDWR);
  CATCH_REQUIRE(fd >= 0);
  uint64_t bad = 0x37;
  CATCH_REQUIRE(pwrite(fd, &bad, sizeof bad, static_cast<off_t>(i.states_offset + 8 * 2)) == 8);
  ::close(fd);
  CATCH_CHECK(s.state(2) == slab::SlotState::invalid);
  CATCH_CHECK(std::string(slab::state_name(s.state(2))) == "invalid");
  CATCH_CHECK(!s.view(2));
  CATCH_CHECK(s.counts().invalid == 1);
  CATCH_CHECK(s.repair() == 1);
  CATCH_CHECK(s.state(2) == slab::SlotState::empty);
  CATCH_CHECK(s.counts().invalid == 0);
}

CATCH_TEST_CASE("shm slab: a sealed digest detects a changed byte", "[shm]") {
  test::ShmPrefix p("tcunit");
  auto o = fixed("seal", 16, {8}, 16);
  o.content_id = "cache-fingerprint/cnn";
  auto s = slab::Slab::create(o);
  for (uint64_t k = 0; k < 16; ++k) {
    auto v = item(k, 8);
    CATCH_REQUIRE(s.set(k, v.data(), v.size()));
  }
  CATCH_CHECK(!s.info().sealed_digest);
  s.seal(s.data_digest());
  auto r = slab::Slab::attach("seal", true);
  CATCH_CHECK(r.info().content_id == "cache-fingerprint/cnn");
  CATCH_REQUIRE(r.info().sealed_digest);
  CATCH_CHECK(*r.info().sealed_digest == r.data_digest());
  const_cast<unsigned char*>(static_cast<const unsigned char*>(r.items()))[8 * 5 + 3] ^= 1;
  CATCH_CHECK(*r.info().sealed_digest != r.data_digest());
}

CATCH_TEST_CASE("shm slab: a prefix that is not a plain name is refused", "[shm]") {
  test::ShmPrefix p("tcunit");
  setenv("TRAINCACHE_SHM_PREFIX", "./../../x", 1);
  CATCH_CHECK(code_of([] { slab::object_prefix(); }) == Exit::usage);
  setenv("TRAINCACHE_SHM_PREFIX", "a/b", 1);
  CATCH_CHECK(code_of([] { slab::object_prefix(); }) == Exit::usage);
  setenv("TRAINCACHE_SHM_PREFIX", ("tcunit-" + std::to_string(getpid()) + "-").c_str(), 1);
  CATCH_CHECK(code_of([] { slab::object_prefix(); }) == Exit::ok);
}
