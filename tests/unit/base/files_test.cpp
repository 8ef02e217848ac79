#include "traincache/base/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "catch.h"
#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"

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

CATCH_TEST_CASE("a second signal removes the temporary and lock files it finds, then ends the process", "[files]") {
  char dir_template[] = "/tmp/tc-hardstop.XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string out = dir + "/out.h5";
  int ready[2];
  CATCH_REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {  // a run holding the lock and writing a temporary file, and one it published
    install_interrupt_handlers("test: interrupted\n");
    files::OutputLock lock(out, "test");
    files::TempFile tmp(out);
    tmp.write_all("x", 1);
    files::TempFile done(dir + "/done.h5");
    done.commit();
    const std::string path = tmp.path();
    const ssize_t n = ::write(ready[1], path.c_str(), path.size());
    (void)n;
    ::raise(SIGINT);  // the first: only the flag (and the notice)
    if (!interrupt_requested()) ::_exit(3);
    ::raise(SIGINT);  // the second: the files removed, the process ended by the signal
    ::_exit(4);
  }
  ::close(ready[1]);
  char buf[4096] = "";
  const ssize_t n = ::read(ready[0], buf, sizeof buf - 1);
  ::close(ready[0]);
  int status = 0;
  CATCH_REQUIRE(::waitpid(child, &status, 0) == child);
  CATCH_CHECK(WIFSIGNALED(status));
  CATCH_CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGINT));
  CATCH_REQUIRE(n > 0);
  struct stat st;
  CATCH_CHECK(::stat(buf, &st) != 0);                         // the temporary file
  CATCH_CHECK(::stat((out + ".lock").c_str(), &st) != 0);     // the lock file
  CATCH_CHECK(::stat((dir + "/done.h5").c_str(), &st) == 0);  // a file renamed into place stays
  ::unlink((dir + "/done.h5").c_str());
  ::rmdir(dir.c_str());
}

CATCH_TEST_CASE("require_unchanged: a file written, replaced or removed since its identity was taken", "[files]") {
  const std::string path = "ident_model.pt", other = "ident_other.pt";
  auto write = [](const std::string& p, const char* text) {
    std::FILE* f = std::fopen(p.c_str(), "w");
    CATCH_REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  auto refused = [&](const files::Identity& was) {
    try {
      files::require_unchanged(path, was, "while its digest was computed");
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::temp_failure);
      CATCH_CHECK(std::string(e.what()) ==
                  path + ": changed while its digest was computed (written or replaced); run again");
      return true;
    }
    return false;
  };
  write(path, "weights-1");
  const files::Identity first = files::identity(path);
  CATCH_CHECK_FALSE(refused(first));  // read, not written: the same file
  CATCH_CHECK(files::identity(path) == first);

  // Replaced by a rename (as torch.save through a temporary file, or cp --remove-destination):
  // another inode, though size and content could be the same.
  write(other, "weights-1");
  CATCH_REQUIRE(std::rename(other.c_str(), path.c_str()) == 0);
  CATCH_CHECK(refused(first));

  // Written in place with the same size, its modification time set back as a copy tool may: the
  // change time still moves (after the clock's tick, which files' times are taken at).
  const files::Identity second = files::identity(path);
  struct timespec tick = {0, 50 * 1000 * 1000};
  nanosleep(&tick, nullptr);
  write(path, "weights-2");
  struct timespec times[2] = {{0, UTIME_OMIT}, {second.mtime_ns / 1000000000, second.mtime_ns % 1000000000}};
  CATCH_REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  CATCH_CHECK(files::identity(path).mtime_ns == second.mtime_ns);
  CATCH_CHECK(refused(second));

  // Removed: changed as much as a file can; its identity cannot be taken at all.
  const files::Identity third = files::identity(path);
  ::unlink(path.c_str());
  CATCH_CHECK(refused(third));
  try {
    files::identity(path);
    CATCH_FAIL("a missing file has an identity");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::no_input);
  }
}
