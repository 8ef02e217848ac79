#include "traincache/base/cores.h"

#include <sched.h>

#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "traincache/base/error.h"

using namespace traincache;

CATCH_TEST_CASE("cores: a cgroup's cpu.max in cores, rounded up", "[cores]") {
  CATCH_CHECK(cores_of_cpu_max("200000 100000") == 2u);
  CATCH_CHECK(cores_of_cpu_max("150000 100000") == 2u);
  CATCH_CHECK(cores_of_cpu_max("50000 100000") == 1u);
  CATCH_CHECK(cores_of_cpu_max("400000 100000\n") == 4u);
  for (const char* none : {"max 100000", "", "abc 100000", "100000 0", "-1 100000", "100000"})
    CATCH_CHECK_FALSE(cores_of_cpu_max(none).has_value());
}

CATCH_TEST_CASE("cores: the affinity mask limits them", "[cores]") {
  const unsigned all = usable_cores();
  CATCH_CHECK(all >= 1u);
  CATCH_CHECK(all <= std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t was, one;
  CATCH_REQUIRE(sched_getaffinity(0, sizeof was, &was) == 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &was)) {
      CPU_SET(c, &one);
      break;
    }
  CATCH_REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const unsigned pinned = usable_cores();
  CATCH_REQUIRE(sched_setaffinity(0, sizeof was, &was) == 0);
  CATCH_CHECK(pinned == 1u);
  CATCH_CHECK(usable_cores() == all);
}

CATCH_TEST_CASE("cores: the OpenMP variables that limit a team", "[cores]") {
  auto limit = [](std::vector<const char*> vars) {
    vars.push_back(nullptr);
    return openmp_thread_limit(vars.data());
  };
  CATCH_CHECK(limit({}) == 0);
  CATCH_CHECK(limit({"PATH=/bin", "OMP_NUM_THREADS=4"}) == 0);  // a default, not a limit
  CATCH_CHECK(limit({"OMP_THREAD_LIMIT=1"}) == 1);
  CATCH_CHECK(limit({"OMP_THREAD_LIMIT= 3 "}) == 3);
  CATCH_CHECK(limit({"OMP_THREAD_LIMIT=0"}) == 0);  // not a positive number: ignored, as runtimes do
  CATCH_CHECK(limit({"OMP_THREAD_LIMIT=two"}) == 0);
  CATCH_CHECK(limit({"OMP_MAX_ACTIVE_LEVELS=0"}) == 1);
  CATCH_CHECK(limit({"OMP_MAX_ACTIVE_LEVELS=1", "OMP_THREAD_LIMIT=5"}) == 5);
  CATCH_CHECK(limit({"OMP_DYNAMIC=true"}) == 1);
  CATCH_CHECK(limit({"OMP_DYNAMIC=TRUE", "OMP_THREAD_LIMIT=8"}) == 1);
  CATCH_CHECK(limit({"OMP_DYNAMIC=false", "OMP_THREAD_LIMIT=8"}) == 8);
  CATCH_CHECK(limit({"XOMP_THREAD_LIMIT=1", "OMP_THREAD_LIMITS=1"}) == 0);  // only the variable itself
}

CATCH_TEST_CASE("cores: GOMP_CPU_AFFINITY naming a CPU this process may not use is refused", "[cores]") {
  cpu_set_t mask;
  CATCH_REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  int mine = 0;
  while (!CPU_ISSET(mine, &mask)) ++mine;
  const std::string ok = "GOMP_CPU_AFFINITY=" + std::to_string(mine);
  const std::vector<std::string> fine{ok, "GOMP_CPU_AFFINITY=junk", "GOMP_CPU_AFFINITY=1-x", "OTHER=1000"};
  for (const auto& var : fine) {
    const char* env[] = {var.c_str(), nullptr};
    CATCH_CHECK_NOTHROW(check_openmp_affinity(env));
  }
  for (const char* var : {"GOMP_CPU_AFFINITY=1000-1002", "GOMP_CPU_AFFINITY=5000", "GOMP_CPU_AFFINITY=0,1000-1004:2"}) {
    const char* env[] = {var, nullptr};
    try {
      check_openmp_affinity(env);
      CATCH_FAIL("no error for " << var);
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::unavailable);
      CATCH_CHECK(std::string(e.what()).rfind("GOMP_CPU_AFFINITY: names CPU ", 0) == 0);
    }
  }
}
