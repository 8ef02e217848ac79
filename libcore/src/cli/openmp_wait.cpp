// Linked into every program that links LibTorch (tc_add_tool TORCH: the benchmark programs; the
// tools load LibTorch as a module and set the same in base/module.cpp), never into a library:
// OpenMP threads that spin briefly and then sleep (base/openmp_wait.h), unless the user chose.
//
// libgomp (Debian's LibTorch and OpenBLAS, and the copy pip's torch ships) reads OMP_WAIT_POLICY
// and GOMP_SPINCOUNT once, in its constructor; left alone, it spins idle threads for ~3 ms before
// they sleep. On a machine shared with other jobs those spinning threads take the cores the working
// ones need: a small gc-train run took 275.6 s with the default threads against 0.8 s with passive
// waiting on a loaded 2-core machine (issue 43, item 14). No API changes the policy later, and the
// environment cannot be changed in time from inside the process: a setenv() from the executable's
// .preinit_array (run before any library's constructor) is lost when the C library's own
// initialisation sets the environment back to the one the process was started with, before
// libgomp's constructor reads it (measured: GOMP_SPINCOUNT stayed 300000). So the program starts
// itself again, once, with the settings in its environment, from the .preinit_array (before any
// library has run); the second start removes the variables from its environment in its own
// constructor (after libgomp's has read them), so that children see the environment the program was
// given. Where /proc/self/exe cannot be executed, it goes on as it is.
#include "traincache/base/openmp_wait.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr const char* kMarker = "TRAINCACHE_OMP_RESTARTED=1";

bool has(char** envp, const char* prefix) {
  for (char** e = envp; e && *e; ++e)
    if (std::strncmp(*e, prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

void openmp_wait(int, char** argv, char** envp) {
  using namespace traincache;
  const std::string policy = std::string(kOmpPolicyVariable) + "=", spin = std::string(kOmpSpinVariable) + "=";
  if (has(envp, policy.c_str()) || has(envp, spin.c_str()) || has(envp, "TRAINCACHE_OMP_RESTARTED=")) return;
  const std::string ours[] = {policy + kOmpPolicy, spin + kOmpSpinCount};
  std::vector<char*> env;
  for (char** e = envp; e && *e; ++e) env.push_back(*e);
  for (const std::string& s : ours) env.push_back(const_cast<char*>(s.c_str()));
  env.push_back(const_cast<char*>(kMarker));
  env.push_back(nullptr);
  ::execve("/proc/self/exe", argv, env.data());  // returns only when it failed: go on as libgomp chose
}

// The second start: libgomp has read the settings (libraries are initialised before the program).
__attribute__((constructor)) void forget_restart() {
  const char* marker = std::getenv("TRAINCACHE_OMP_RESTARTED");
  if (!marker) return;
  ::unsetenv("TRAINCACHE_OMP_RESTARTED");
  ::unsetenv(traincache::kOmpPolicyVariable);
  ::unsetenv(traincache::kOmpSpinVariable);
}

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const traincache_preinit)(int, char**,
                                                                                         char**) = &openmp_wait;
