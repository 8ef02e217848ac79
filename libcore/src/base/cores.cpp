#include "traincache/base/cores.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace traincache {

namespace {

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// This process's cgroup v2 path ("0::/a/b" in /proc/self/cgroup), or "" when there is none.
std::string cgroup2_path() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

std::optional<unsigned> quota_cores() {
  const std::string path = cgroup2_path();
  if (auto cores = cores_of_cpu_max(first_line("/sys/fs/cgroup" + path + "/cpu.max"))) return cores;
  if (path != "/")
    if (auto cores = cores_of_cpu_max(first_line("/sys/fs/cgroup/cpu.max"))) return cores;
  // cgroup v1: the cpu controller's quota and period (a quota of -1 is no limit).
  const std::string quota = first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  const std::string period = first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (quota.empty() || period.empty() || quota[0] == '-') return std::nullopt;
  return cores_of_cpu_max(quota + " " + period);
}

}  // namespace

std::optional<unsigned> cores_of_cpu_max(const std::string& value) {
  std::istringstream in(value);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  long long q = 0;
  try {
    std::size_t used = 0;
    q = std::stoll(quota, &used);
    if (used != quota.size() || q <= 0) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return static_cast<unsigned>(std::max<long long>(1, (q + period - 1) / period));
}

unsigned usable_cores() {
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = std::max(1, CPU_COUNT(&set));
  if (auto q = quota_cores()) n = std::min(n, *q);
  return std::max(1u, n);
}

}  // namespace traincache
