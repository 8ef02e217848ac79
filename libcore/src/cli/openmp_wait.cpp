// Linked into every program that links LibTorch (tc_add_tool TORCH: the benchmark programs; the
// tools load LibTorch as a module and set the same in base/module.cpp), never into a library:
// OpenMP threads that wait by sleeping instead of spinning, unless the user chose otherwise.
//
// libgomp (Debian's LibTorch and OpenBLAS, and the copy pip's torch ships) reads OMP_WAIT_POLICY
// once, in its constructor, and then spins idle threads for a while before they sleep. On a
// machine shared with other jobs those spinning threads take the cores the working ones need: a
// small gc-train run took 275.6 s with the default threads against 0.8 s with passive waiting on a
// loaded 2-core machine (issue 43, item 14). No API changes the policy later, and the environment
// cannot be changed in time from inside the process: a setenv() from the executable's
// .preinit_array (run before any library's constructor) is lost when the C library's own
// initialisation sets the environment back to the one the process was started with, before
// libgomp's constructor reads it (measured: GOMP_SPINCOUNT stayed 300000). So the program starts
// itself again, once, with the policy in its environment, from the .preinit_array (before any
// library has run); the second start removes the variables from its environment in its own
// constructor (after libgomp's has read them), so that children see the environment the program
// was given. Where /proc/self/exe cannot be executed, it goes on as it is.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr const char* kMarker = "TRAINCACHE_OMP_RESTARTED=1";

bool has(char** envp, const char* prefix) {
  for (char** e = envp; e && *e; ++e)
    if (std::strncmp(*e, prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

void passive_openmp_wait(int, char** argv, char** envp) {
  if (has(envp, "OMP_WAIT_POLICY=") || has(envp, "TRAINCACHE_OMP_RESTARTED=")) return;
  std::vector<char*> env;
  for (char** e = envp; e && *e; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>("OMP_WAIT_POLICY=PASSIVE"));
  env.push_back(const_cast<char*>(kMarker));
  env.push_back(nullptr);
  ::execve("/proc/self/exe", argv, env.data());  // returns only when it failed: go on spinning
}

// The second start: libgomp has read the policy (libraries are initialised before the program).
__attribute__((constructor)) void forget_restart() {
  const char* marker = std::getenv("TRAINCACHE_OMP_RESTARTED");
  if (!marker) return;
  ::unsetenv("TRAINCACHE_OMP_RESTARTED");
  ::unsetenv("OMP_WAIT_POLICY");
}

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const traincache_preinit)(int, char**,
                                                                                         char**) = &passive_openmp_wait;
