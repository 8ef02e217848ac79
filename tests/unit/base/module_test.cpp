#include "traincache/base/module.h"

#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>
#include <vector>

#include "catch.h"

using namespace traincache;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Writes every page of a fresh block of BYTES and frees it; the minor page faults that took.
long faults_of_block(size_t bytes) {
  const long before = minor_faults();
  auto* p = static_cast<volatile char*>(std::malloc(bytes));
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  std::free(const_cast<char*>(p));
  return minor_faults() - before;
}

}  // namespace

#ifdef __GLIBC__
CATCH_TEST_CASE("module: the user's malloc settings win over keep_freed_memory", "[module]") {
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.check=0", 1);
  CATCH_CHECK_FALSE(keep_freed_memory());
  ::setenv("GLIBC_TUNABLES", "glibc.rtld.nns=4", 1);
  ::setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
  CATCH_CHECK_FALSE(keep_freed_memory());
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  ::unsetenv("GLIBC_TUNABLES");
}

// A batch's tensors are freed and allocated again: glibc maps a block above its threshold (128 KiB,
// raised to the size of each mapped block freed, up to 32 MiB) on its own and unmaps it when it
// is freed, so its pages fault in anew the next time. With the settings a block of 31 MiB (above
// any threshold glibc sets itself unless such a block was freed before) comes from the heap and
// stays there, free, once freed, and the next one faults in no pages.
CATCH_TEST_CASE("module: keep_freed_memory keeps a freed 31 MiB block for the next", "[module]") {
  CATCH_REQUIRE(keep_freed_memory());
  const size_t bytes = size_t{31} << 20, pages = bytes / 4096;
  const size_t mapped = mallinfo2().hblkhd;
  auto* p = static_cast<volatile char*>(std::malloc(bytes));
  p[0] = 1;
  CATCH_CHECK(mallinfo2().hblkhd < mapped + bytes);  // not a mapping of its own
  std::free(const_cast<char*>(p));
  CATCH_CHECK(mallinfo2().fordblks >= bytes);  // kept in the heap, free
  faults_of_block(bytes);
  CATCH_CHECK(faults_of_block(bytes) < static_cast<long>(pages / 10));
}
#endif

#ifdef __GLIBC__
// A model's load allocates its tensors in the blocks warm_heap faulted in and freed: they stay at
// the heap's top (keepcost), and blocks as large taken afterwards fault in next to no pages.
CATCH_TEST_CASE("module: warm_heap leaves its pages free at the heap's top for what comes next", "[module]") {
  CATCH_REQUIRE(keep_freed_memory());
  const size_t bytes = size_t{64} << 20, block = size_t{20} << 20;
  int asked = 0;
  warm_heap(bytes, [&] { return ++asked > 1000; });
  CATCH_CHECK(asked == 8);  // asked before each of its 8 MiB blocks
  CATCH_CHECK(mallinfo2().keepcost >= bytes);
  const long before = minor_faults();
  std::vector<volatile char*> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(static_cast<volatile char*>(std::malloc(block)));
    for (size_t j = 0; j < block; j += 4096) held.back()[j] = 1;
  }
  CATCH_CHECK(minor_faults() - before < static_cast<long>(3 * block / 4096 / 10));
  for (auto* p : held) std::free(const_cast<char*>(p));
  // It stops once told, and does nothing where the user chose malloc's settings.
  asked = 0;
  warm_heap(bytes, [&] { return ++asked > 2; });
  CATCH_CHECK(asked == 3);
  ::setenv("MALLOC_TOP_PAD_", "0", 1);
  asked = 0;
  warm_heap(bytes, [&] { return ++asked > 1000; });
  ::unsetenv("MALLOC_TOP_PAD_");
  CATCH_CHECK(asked == 0);
}
#endif
