#include "traincache/base/cores.h"

#include <sched.h>

#include <thread>

#include "catch.h"

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

CATCH_TEST_CASE("cores: the default threads leave the cores other jobs are using", "[cores]") {
  // /proc/loadavg's fourth field: runnable tasks, this process among them.
  CATCH_CHECK(running_of_loadavg("0.52 0.58 0.59 3/431 12345") == 3u);
  CATCH_CHECK_FALSE(running_of_loadavg("0.52 0.58 0.59"));
  CATCH_CHECK_FALSE(running_of_loadavg("0.52 0.58 0.59 x/431 1"));
  CATCH_CHECK(cores_left(2, 1, 0) == 2);  // only this process: every core
  CATCH_CHECK(cores_left(2, 3, 0) == 1);  // two busy jobs on 2 cores: one thread, not a fight
  CATCH_CHECK(cores_left(16, 5, 0) == 12);
  CATCH_CHECK(cores_left(16, 8, 7) == 16);  // the 7 others are this job's own ranks
  CATCH_CHECK(cores_left(4, 40, 0) == 1);   // at least one
  CATCH_CHECK(idle_cores() >= 1);
  CATCH_CHECK(idle_cores() <= usable_cores());
}
