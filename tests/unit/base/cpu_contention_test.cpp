#include "traincache/base/cpu_contention.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "catch.h"

using namespace traincache;

namespace {
std::vector<ThreadTimes> threads(std::initializer_list<ThreadTimes> t) { return t; }
}  // namespace

CATCH_TEST_CASE("cpu contention: waiting while cores were left unused is other processes' doing", "[contention]") {
  ContentionMeter m(2);
  // One second; two threads ran half of it each and waited the other half: the process used one
  // core of two, so others held the other.
  m.add(threads({{1, 0, 0}, {2, 0, 0}}), threads({{1, 0.5, 0.5}, {2, 0.5, 0.5}}), 1.0);
  const CpuContention c = m.result();
  CATCH_CHECK(c.measured);
  CATCH_CHECK(c.cores == 2u);
  CATCH_CHECK(c.running_seconds == Approx(1.0));
  CATCH_CHECK(c.waiting_seconds == Approx(1.0));
  CATCH_CHECK(c.inferred_others_seconds == Approx(1.0));
  CATCH_CHECK(c.others_cores == Approx(1.0));
  CATCH_CHECK(c.competed());
  CATCH_CHECK(contention_note(c, "try this") ==
              "other processes competed for the cores: this run's threads waited 1.0 s for a core (1.0x the 1.0 s "
              "they ran); others held about 1.0 of its 2 cores on average, so the rates above are shared; try this");
  // Where nothing in the tool's options helps, the note says what happened and stops there.
  CATCH_CHECK(contention_note(c, "") ==
              "other processes competed for the cores: this run's threads waited 1.0 s for a core (1.0x the 1.0 s "
              "they ran); others held about 1.0 of its 2 cores on average, so the rates above are shared");
  // The progress line's note, from a watch's last window.
  CATCH_CHECK(slowed_note(c, "try --threads 1") == "slowed: others hold 1.0 of 2 cores; try --threads 1");
  CATCH_CHECK(slowed_note(c, "") == "slowed: others hold 1.0 of 2 cores");
  CATCH_CHECK(slowed_note(CpuContention{}, "try this").empty());
}

CATCH_TEST_CASE("cpu contention: a watch's last window is there once one ends", "[contention]") {
  CpuContentionWatch w(10, 50);
  CATCH_CHECK_FALSE(w.recent().measured);  // no window has ended yet
  const auto t0 = std::chrono::steady_clock::now();
  volatile double x = 0;  // this thread runs: the window has something to measure
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) x = x + 1;
  const CpuContention recent = w.recent();
  CATCH_CHECK(recent.measured);
  CATCH_CHECK(recent.seconds >= 0.05);
  const CpuContention all = w.stop();
  CATCH_CHECK(all.seconds >= 0.3);
  CATCH_CHECK(recent.seconds < all.seconds);  // a window, not the whole span
}

CATCH_TEST_CASE("cpu contention: the process's own threads outnumbering its cores is not contention", "[contention]") {
  ContentionMeter m(2);
  // Four threads, both cores busy with them all second: each waited half of it, for one another.
  m.add(threads({}), threads({{1, 0.5, 0.5}, {2, 0.5, 0.5}, {3, 0.5, 0.5}, {4, 0.5, 0.5}}), 1.0);
  const CpuContention c = m.result();
  CATCH_CHECK(c.waiting_seconds == Approx(2.0));
  CATCH_CHECK(c.inferred_others_seconds == Approx(0.0));
  CATCH_CHECK_FALSE(c.competed());
  CATCH_CHECK(contention_note(c, "try this").empty());
}

CATCH_TEST_CASE("cpu contention: threads that start or end between samples", "[contention]") {
  ContentionMeter m(4);
  // Thread 1 ran on; thread 2 ended (not counted); thread 3 started (counted from zero).
  m.add(threads({{1, 10, 1}, {2, 5, 5}}), threads({{1, 10.5, 1.25}, {3, 0.25, 0.25}}), 1.0);
  const CpuContention c = m.result();
  CATCH_CHECK(c.running_seconds == Approx(0.75));
  CATCH_CHECK(c.waiting_seconds == Approx(0.5));
  CATCH_CHECK(c.inferred_others_seconds == Approx(0.5));
  CATCH_CHECK(c.others_cores == Approx(0.5));
  CATCH_CHECK(c.competed());  // 0.5 s of waiting, two thirds of the running time
}

CATCH_TEST_CASE("cpu contention: a little waiting is not worth a note", "[contention]") {
  ContentionMeter small(1), share(1);
  small.add(threads({}), threads({{1, 0.2, 0.4}}), 1.0);  // waited 0.4 s: less than half a second
  CATCH_CHECK_FALSE(small.result().competed());
  share.add(threads({}), threads({{1, 4.0, 0.9}}), 10.0);  // 0.9 s, under a quarter of 4 s running
  CATCH_CHECK_FALSE(share.result().competed());
  share.add(threads({}), threads({{1, 4.0, 1.1}}), 10.0);  // 1.1 s: over a quarter
  CATCH_CHECK(share.result().competed());
  ContentionMeter none(2);
  CATCH_CHECK_FALSE(none.result().measured);
  CATCH_CHECK_FALSE(none.result().competed());
}

CATCH_TEST_CASE("cpu contention: the watch samples this process's threads", "[contention]") {
  // A kernel without per-thread scheduler statistics gives no threads, and the watch says so.
  const auto now = read_thread_times();
  CpuContentionWatch watch(20);
  if (now.empty()) {
    CATCH_CHECK_FALSE(watch.stop().measured);
    return;
  }
  CATCH_CHECK(now.end() != std::find_if(now.begin(), now.end(),
                                        [](const ThreadTimes& t) { return t.tid == static_cast<long>(getpid()); }));
  // Spin until this thread has run 0.1 s, however busy the machine (its wall time may be longer).
  auto ran = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double from = ran();
  volatile unsigned long spin = 0;
  while (ran() - from < 0.1) spin = spin + 1;
  const CpuContention c = watch.stop();
  CATCH_CHECK(c.measured);
  CATCH_CHECK(c.seconds >= 0.1);
  CATCH_CHECK(c.running_seconds >= 0.09);
  CATCH_CHECK(c.running_seconds <= c.seconds * c.cores + 0.05);
  CATCH_CHECK(watch.stop().seconds == c.seconds);  // stopped once
}
