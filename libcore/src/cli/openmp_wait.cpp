// Linked into every program that links LibTorch (tc_add_tool TORCH: the benchmark programs; the
// tools load LibTorch as a module and set the same in base/module.cpp), never into a library:
// OpenMP threads that wait by sleeping instead of spinning, unless the user chose otherwise.
//
// libgomp (Debian's LibTorch and OpenBLAS, and the copy pip's torch ships) reads OMP_WAIT_POLICY
// once, in its constructor, and then spins idle threads for a while before they sleep. On a
// machine shared with other jobs those spinning threads take the cores the working ones need: a
// small gc-train run took 275.6 s with the default threads against 0.8 s with passive waiting on a
// loaded 2-core machine (issue 43, item 14). No API changes the policy later, so it is set here,
// from the executable's .preinit_array, which the dynamic linker runs before any shared library's
// constructor. The C library sets the process's environment afresh when main starts, so the
// setting reaches libgomp and nothing else (children see the environment the tool was given).
#include <cstdlib>

namespace {

void passive_openmp_wait(int, char**, char**) { ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0); }

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const traincache_preinit)(int, char**,
                                                                                         char**) = &passive_openmp_wait;
