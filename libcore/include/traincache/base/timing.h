// Wall-clock timing for the engines' reports (seconds as doubles, from a monotonic clock).
#pragma once

#include <chrono>

namespace traincache {

/// The monotonic clock every engine times with.
using Clock = std::chrono::steady_clock;

/// Seconds from `t` to now.
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace traincache
