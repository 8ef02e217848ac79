// The C ABI as other languages see it: linked against libtraincache_c.so, nothing else of libcore.
#include "traincache/c_api/c_api.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "catch.h"

namespace {

struct Prefix {
  Prefix() { setenv("TRAINCACHE_SHM_PREFIX", ("tccapi-" + std::to_string(getpid()) + "-").c_str(), 1); }
  ~Prefix() {
    for (const char* n : {"a", "ro", "v"}) tc_slab_remove(n);
  }
};

nlohmann::json take(char* text) {
  auto j = nlohmann::json::parse(text);
  tc_free(text);
  return j;
}

tc_slab* create(const char* options) {
  tc_slab* s = nullptr;
  CATCH_REQUIRE(tc_slab_create(options, &s) == 0);
  return s;
}

}  // namespace

CATCH_TEST_CASE("c api: failures are minus an exit code with a one-line message", "[capi]") {
  Prefix p;
  CATCH_CHECK(tc_abi_version() == TC_ABI_VERSION);
  CATCH_CHECK(std::string(tc_version()).find(" (git ") != std::string::npos);
  tc_slab* s = nullptr;
  CATCH_CHECK(tc_slab_attach("nope", 1, &s) == -69);
  CATCH_CHECK(std::string(tc_last_error()) == "nope: no such slab in /dev/shm");
  CATCH_CHECK(s == nullptr);
  CATCH_CHECK(tc_slab_create(R"({"name": "a", "length": 4, "dims": [2], "slots": 4, "bogus": 1})", &s) == -64);
  CATCH_CHECK(std::string(tc_last_error()) == "slab options: unknown key 'bogus'");
  CATCH_CHECK(tc_slab_create("[1, 2]", &s) == -64);
  CATCH_CHECK(std::string(tc_last_error()) == "slab options: expected a JSON object");
  CATCH_CHECK(tc_slab_create(R"({"name": "a", "length": "four"})", &s) == -64);
  CATCH_CHECK(std::string(tc_last_error()).rfind("slab options: a value has the wrong type", 0) == 0);
  CATCH_CHECK(tc_slab_create(R"({"name": "a", "length": 4, "dims": [2], "slots": 4, "layout": "ragged"})", &s) == -64);
  CATCH_CHECK(std::string(tc_last_error()) == "layout: expected fixed or variable, got 'ragged'");
  char* json = nullptr;
  CATCH_CHECK(tc_cache_describe("/nonexistent/cache.h5", 0, &json) == -66);
  CATCH_CHECK(json == nullptr);
  // A success clears the message.
  s = create(R"({"name": "a", "length": 4, "dims": [2], "dtype": "int32", "slots": 4})");
  CATCH_CHECK(std::string(tc_last_error()).empty());
  tc_slab_close(s);
  CATCH_CHECK(tc_slab_create(R"({"name": "a", "length": 4, "dims": [2], "slots": 4})", &s) == -73);
  CATCH_CHECK(std::string(tc_last_error()) == "a: a slab with this name exists");
  CATCH_CHECK(tc_slab_remove("a") == 0);
  CATCH_CHECK(tc_slab_remove("a") == -69);
}

CATCH_TEST_CASE("c api: try-begin-write, commit, abort and locate follow the slot protocol", "[capi]") {
  Prefix p;
  tc_slab* s = create(R"({"name": "a", "length": 6, "dims": [2, 2], "dtype": "float32", "slots": 4,
                         "content_id": "x", "temporary": true})");
  auto d = take([&] {
    char* j = nullptr;
    CATCH_REQUIRE(tc_slab_describe(s, 1, &j) == 0);
    return j;
  }());
  CATCH_CHECK(d["name"] == "a");
  CATCH_CHECK(d["dtype"] == "float32");
  CATCH_CHECK(d["dims"] == nlohmann::json::array({2, 2}));
  CATCH_CHECK(d["content_id"] == "x");
  CATCH_CHECK(d["temporary"] == true);
  CATCH_CHECK(d["counts"]["empty"] == 4);
  const uint64_t data = d["offsets"]["data"];
  CATCH_CHECK(tc_slab_fd(s) >= 0);
  CATCH_CHECK(tc_slab_slot(s, 3) == 3);
  CATCH_CHECK(tc_slab_slot(s, 4) == -1);  // beyond the 4 slots
  CATCH_CHECK(tc_slab_state(s, 4) == -1);
  CATCH_CHECK(tc_slab_state(s, 1) == 0);
  uint64_t offset = 0, bytes = 0;
  CATCH_CHECK(tc_slab_begin_write(s, 1, 15, &offset) == 0);  // wrong size: nothing claimed
  CATCH_CHECK(tc_slab_begin_write(s, 1, 16, &offset) == 1);
  CATCH_CHECK(offset == data + 16);
  CATCH_CHECK(tc_slab_state(s, 1) == 1);
  CATCH_CHECK(tc_slab_begin_write(s, 1, 16, &offset) == 0);  // claimed once
  CATCH_CHECK(tc_slab_locate(s, 1, &offset, &bytes) == 0);   // a miss until published
  CATCH_CHECK(tc_slab_commit(s, 1) == 1);
  CATCH_CHECK(tc_slab_commit(s, 1) == 0);
  CATCH_CHECK(tc_slab_locate(s, 1, &offset, &bytes) == 1);
  CATCH_CHECK(offset == data + 16);
  CATCH_CHECK(bytes == 16);
  CATCH_CHECK(tc_slab_begin_write(s, 2, 16, &offset) == 1);
  CATCH_CHECK(tc_slab_abort(s, 2) == 1);
  CATCH_CHECK(tc_slab_state(s, 2) == 0);
  // A process that dies holding a claim leaves it WRITING until repair.
  pid_t pid = fork();
  if (pid == 0) {
    tc_slab* c = nullptr;
    uint64_t o = 0;
    if (tc_slab_attach("a", 1, &c) != 0 || tc_slab_begin_write(c, 3, 16, &o) != 1) _exit(1);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CATCH_REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CATCH_CHECK(tc_slab_state(s, 3) == 1);
  CATCH_CHECK(tc_slab_commit(s, 3) == 0);  // not this process's claim
  CATCH_CHECK(tc_slab_repair(s) == 1);
  CATCH_CHECK(tc_slab_state(s, 3) == 0);
  tc_slab_close(s);

  tc_slab* ro = nullptr;
  CATCH_REQUIRE(tc_slab_attach("a", 0, &ro) == 0);
  CATCH_CHECK(tc_slab_locate(ro, 1, &offset, &bytes) == 1);
  CATCH_CHECK(tc_slab_begin_write(ro, 0, 16, &offset) == -64);
  CATCH_CHECK(std::string(tc_last_error()) == "a: attached read-only");
  CATCH_CHECK(tc_slab_repair(ro) == -64);
  tc_slab_close(ro);
}

CATCH_TEST_CASE("c api: a variable layout reserves each item's bytes in the arena", "[capi]") {
  Prefix p;
  tc_slab* s = create(R"({"name": "v", "length": 8, "layout": "variable", "dtype": "int64", "limit_bytes": 64})");
  uint64_t a = 0, b = 0, bytes = 0;
  CATCH_CHECK(tc_slab_begin_write(s, 5, 40, &a) == 1);
  CATCH_CHECK(tc_slab_begin_write(s, 2, 24, &b) == 1);
  CATCH_CHECK(b == a + 40);
  CATCH_CHECK(tc_slab_begin_write(s, 3, 8, &b) == 0);  // the arena is full
  CATCH_CHECK(tc_slab_commit(s, 5) == 1);
  CATCH_CHECK(tc_slab_locate(s, 5, &b, &bytes) == 1);
  CATCH_CHECK(b == a);
  CATCH_CHECK(bytes == 40);
  tc_slab_close(s);
}
