// How many cores this process may use. Torch-free.
#pragma once

#include <optional>
#include <string>

namespace traincache {

/// The cores this process may run on: its CPU affinity mask (taskset, cpusets, a scheduler's
/// allocation), capped by the CPU quota of its cgroup (cgroup v2 cpu.max, or v1
/// cpu.cfs_quota_us / cpu.cfs_period_us, as containers set them), rounded up; at least 1.
/// std::thread::hardware_concurrency counts every core of the machine instead, so a job given
/// 2 cores of 64 would start 64 threads on them.
unsigned usable_cores();

/// The cores of usable_cores() that other work is not using now: the default thread count. A
/// process's threads that outnumber the cores left to it wait for each other at every parallel
/// region while other jobs hold the cores (a small gc-train run: 4.5 s with 2 threads beside two
/// busy processes on 2 cores, 1.2 s with 1; 0.6 s either way on a quiet machine). Counts the
/// runnable tasks /proc/loadavg reports (the least of three readings a few milliseconds apart, so a
/// passing task does not count), less this process and `peers` (processes of the same job, such as
/// the other data-parallel ranks of this machine, whose share is accounted for separately); at
/// least 1, usable_cores() when /proc/loadavg cannot be read.
unsigned idle_cores(unsigned peers = 0);

/// The cores left of `usable` when `running` tasks are runnable, this process and `peers` among
/// them; at least 1.
unsigned cores_left(unsigned usable, unsigned running, unsigned peers);

/// The runnable tasks of a /proc/loadavg line ("0.52 0.58 0.59 3/431 12345": 3); nothing when it
/// does not parse.
std::optional<unsigned> running_of_loadavg(const std::string& line);

/// The cores a cgroup v2 `cpu.max` value ("QUOTA PERIOD", or "max PERIOD" for no limit) allows,
/// rounded up; nothing for no limit or a value that does not parse.
std::optional<unsigned> cores_of_cpu_max(const std::string& value);

}  // namespace traincache
