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

/// The cores a cgroup v2 `cpu.max` value ("QUOTA PERIOD", or "max PERIOD" for no limit) allows,
/// rounded up; nothing for no limit or a value that does not parse.
std::optional<unsigned> cores_of_cpu_max(const std::string& value);

}  // namespace traincache
