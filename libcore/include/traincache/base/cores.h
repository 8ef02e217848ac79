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

/// The most threads one OpenMP team may have in this process, as the OpenMP variables of `env`
/// ("NAME=VALUE" strings; null: this process's environment) say: OMP_THREAD_LIMIT=N caps it at N,
/// OMP_MAX_ACTIVE_LEVELS=0 and OMP_DYNAMIC=true at 1 (no parallel region runs with more than one
/// thread, or the runtime may give a team fewer threads than asked, which OpenBLAS and LibTorch
/// then wait for without end); 0 when nothing limits it. Values that do not parse limit nothing,
/// as OpenMP runtimes ignore them.
unsigned openmp_thread_limit(const char* const* env = nullptr);

/// The intra-op threads a tool uses: `threads` when > 0, else one per usable core, or
/// OMP_NUM_THREADS (its first value) when set; capped by openmp_thread_limit(); at least 1.
int intra_op_threads(int threads);

/// Error(unavailable, "GOMP_CPU_AFFINITY", ...) when that variable of `env` (null: this process's
/// environment) names a CPU outside this process's affinity mask: libgomp binds its threads to the
/// CPUs listed and, failing to start one there, ends the process (exit 1, or a crash) after a tool
/// has taken its output's lock. Called before LibTorch is loaded. A value that does not parse is
/// left to libgomp, which ignores it.
void check_openmp_affinity(const char* const* env = nullptr);

/// The int8 dot-product instructions this CPU has, best first, as the bottleneck line names them for
/// --precision int8: "AMX" (AMX-INT8 tiles), "AVX512-VNNI", "AVX-VNNI", "AVX-512" (AVX512BW, no
/// VNNI), "AVX2", else "SSE" (x86-64), or "" elsewhere. Which of them a kernel uses is its library's
/// choice (fbgemm's have AVX512-VNNI and AVX2 paths, oneDNN's AMX ones too).
std::string int8_instructions();

/// The cores a cgroup v2 `cpu.max` value ("QUOTA PERIOD", or "max PERIOD" for no limit) allows,
/// rounded up; nothing for no limit or a value that does not parse.
std::optional<unsigned> cores_of_cpu_max(const std::string& value);

}  // namespace traincache
