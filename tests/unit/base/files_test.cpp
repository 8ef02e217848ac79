#include "traincache/base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "catch.h"

using namespace traincache;

namespace {

void write_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  CATCH_REQUIRE(f != nullptr);
  std::fputs("x", f);
  std::fclose(f);
}

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace

CATCH_TEST_CASE("remove_tree: removes a tree, and links as links, never what they point to", "[files]") {
  char tmpl[] = "/tmp/tc-remove-tree-XXXXXX";
  CATCH_REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl, tree = root + "/tree", outside = root + "/outside";
  CATCH_REQUIRE(mkdir(tree.c_str(), 0700) == 0);
  CATCH_REQUIRE(mkdir((tree + "/a").c_str(), 0700) == 0);
  CATCH_REQUIRE(mkdir((tree + "/a/b").c_str(), 0700) == 0);
  CATCH_REQUIRE(mkdir(outside.c_str(), 0700) == 0);
  write_file(tree + "/f");
  write_file(tree + "/a/b/g");
  write_file(outside + "/keep");
  CATCH_REQUIRE(symlink(outside.c_str(), (tree + "/a/dirlink").c_str()) == 0);
  CATCH_REQUIRE(symlink((outside + "/keep").c_str(), (tree + "/filelink").c_str()) == 0);

  CATCH_CHECK(files::remove_tree(tree) == 0);
  CATCH_CHECK_FALSE(exists(tree));
  CATCH_CHECK(exists(outside + "/keep"));
  // A path that does not exist is no error; a link given itself is removed, not its target.
  CATCH_CHECK(files::remove_tree(tree) == 0);
  CATCH_REQUIRE(symlink(outside.c_str(), (root + "/top").c_str()) == 0);
  CATCH_CHECK(files::remove_tree(root + "/top") == 0);
  CATCH_CHECK_FALSE(exists(root + "/top"));
  CATCH_CHECK(exists(outside + "/keep"));
  // A failure is its errno: a directory whose parent cannot be written keeps it.
  if (geteuid() != 0) {
    CATCH_REQUIRE(mkdir((outside + "/sub").c_str(), 0700) == 0);
    CATCH_REQUIRE(chmod(outside.c_str(), 0500) == 0);
    CATCH_CHECK(files::remove_tree(outside + "/sub") == EACCES);
    CATCH_CHECK(exists(outside + "/sub"));
    CATCH_REQUIRE(chmod(outside.c_str(), 0700) == 0);
  }
  CATCH_CHECK(files::remove_tree(root) == 0);
  CATCH_CHECK_FALSE(exists(root));
}
