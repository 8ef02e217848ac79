#include "traincache/base/module.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

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

// A batch's tensors are freed and allocated again at the same sizes: glibc's own thresholds map
// such a block anew each time (its first free raises the threshold to the block's size, and the
// next one of that size is still mapped), so every page faults in again.
CATCH_TEST_CASE("module: keep_freed_memory keeps a freed 16 MiB block's pages for the next", "[module]") {
  CATCH_REQUIRE(keep_freed_memory());
  const size_t bytes = size_t{16} << 20, pages = bytes / 4096;
  faults_of_block(bytes);
  const long again = faults_of_block(bytes);
  CATCH_CHECK(again < static_cast<long>(pages / 10));
}
#endif
