// The one Catch2 main shared by every unit test binary. Tests that write files use relative
// paths; they land in a fresh temporary directory, removed afterwards, wherever the binary runs.
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
  return failed;
}
