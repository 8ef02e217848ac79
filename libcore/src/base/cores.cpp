#include "traincache/base/cores.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
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

// The value of variable `name` in `env` (or this process's environment when null), or null.
const char* env_value(const char* const* env, const char* name) {
  if (!env) return std::getenv(name);
  const std::size_t n = std::strlen(name);
  for (; *env; ++env)
    if (std::strncmp(*env, name, n) == 0 && (*env)[n] == '=') return *env + n + 1;
  return nullptr;
}

// A positive integer at the start of `text` (after blanks; OMP_NUM_THREADS's first value of a
// list "4,2"), or 0.
unsigned leading_count(const char* text) {
  if (!text) return 0;
  while (std::isspace(static_cast<unsigned char>(*text))) ++text;
  if (!std::isdigit(static_cast<unsigned char>(*text))) return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(text, &end, 10);
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0' && *end != ',') return 0;
  return v == 0 || v > UINT_MAX ? 0 : static_cast<unsigned>(v);
}

bool is_true(const char* text) {
  if (!text) return false;
  std::string v;
  for (; *text; ++text)
    if (!std::isspace(static_cast<unsigned char>(*text)))
      v += static_cast<char>(std::tolower(static_cast<unsigned char>(*text)));
  return v == "true";
}

}  // namespace

unsigned openmp_thread_limit(const char* const* env) {
  unsigned limit = leading_count(env_value(env, "OMP_THREAD_LIMIT"));
  const char* levels = env_value(env, "OMP_MAX_ACTIVE_LEVELS");
  if (levels && std::strspn(levels, " 0") == std::strlen(levels) && std::strchr(levels, '0')) limit = 1;
  if (is_true(env_value(env, "OMP_DYNAMIC"))) limit = 1;
  return limit;
}

int intra_op_threads(int threads) {
  unsigned n = threads > 0 ? static_cast<unsigned>(threads) : usable_cores();
  if (threads <= 0)
    if (const unsigned asked = leading_count(std::getenv("OMP_NUM_THREADS"))) n = std::min(n, asked);
  if (const unsigned limit = openmp_thread_limit()) n = std::min(n, limit);
  return static_cast<int>(std::max(1u, std::min(n, static_cast<unsigned>(INT_MAX))));
}

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
