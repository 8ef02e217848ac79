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
#include <vector>

#include "traincache/base/error.h"

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

namespace {

// The CPUs of a GOMP_CPU_AFFINITY list ("0 3 1-2 4-15:2", commas allowed), or nothing when it does
// not parse.
std::optional<std::vector<long>> affinity_cpus(const std::string& text) {
  std::vector<long> cpus;
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  std::string item;
  while (in >> item) {
    long first = 0, last = 0, stride = 1;
    char dash = 0, colon = 0;
    std::istringstream one(item);
    if (!(one >> first) || first < 0) return std::nullopt;
    last = first;
    if (one >> dash) {
      if (dash != '-' || !(one >> last) || last < first) return std::nullopt;
      if (one >> colon && (colon != ':' || !(one >> stride) || stride < 1)) return std::nullopt;
    }
    if (one >> colon) return std::nullopt;  // anything after the item
    for (long c = first; c <= last && cpus.size() < 4096; c += stride) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

void check_openmp_affinity(const char* const* env) {
  const char* value = env_value(env, "GOMP_CPU_AFFINITY");
  if (!value) return;
  const auto cpus = affinity_cpus(value);
  if (!cpus) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
  std::string mine;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) mine += (mine.empty() ? "" : " ") + std::to_string(c);
  for (long c : *cpus)
    if (c >= CPU_SETSIZE || !CPU_ISSET(static_cast<int>(c), &mask))
      throw Error(Exit::unavailable, "GOMP_CPU_AFFINITY",
                  "names CPU " + std::to_string(c) + ", which this process may not run on (its CPUs: " + mine +
                      "); LibTorch's OpenMP threads could not start there: name CPUs of those, or unset it");
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

std::string int8_instructions() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("amx-int8")) return "AMX";
  if (__builtin_cpu_supports("avx512vnni")) return "AVX512-VNNI";
  if (__builtin_cpu_supports("avxvnni")) return "AVX-VNNI";
  if (__builtin_cpu_supports("avx512bw")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  return "SSE";
#else
  return "";
#endif
}

}  // namespace traincache
