// The one Catch2 main shared by every unit test binary. Tests that write files use relative
// paths; they land in a fresh temporary directory, removed afterwards, wherever the binary runs.
// The last line it prints when every selected case ran and passed is the one CTest looks for
// (kEveryCasePassed, PASS_REGULAR_EXPRESSION): a case that ends the process early, with status 0,
// fails the test (run_tool did so from 2026-11-29 to 12-02, and 118 of core_test's 171 cases
// never ran).
#define CATCH_CONFIG_RUNNER  // Catch2 2: this file has the main (Catch2 3 needs no macro)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "catch.h"

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/traincache-unit.XXXXXX";
  if (!mkdtemp(tmpl.data()) || chdir(tmpl.c_str()) != 0) {
    std::perror("unit tests: cannot create a scratch directory");
    return 2;
  }
  int failed = Catch::Session().run(argc, argv);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  if (failed == 0) std::printf("unit tests: every selected case ran and passed\n");
  return failed;
}
