#include "traincache/base/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "traincache/base/error.h"

namespace traincache::files {

namespace {

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char bytes[12];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno != EINTR) throw Error(Exit::internal, "getrandom", errno_text(errno));
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string s;
  for (unsigned char b : bytes) s += kChars[b % (sizeof kChars - 1)];
  return s;
}

mode_t process_umask() {
  static std::once_flag once;
  static mode_t mask = 022;
  std::call_once(once, [] {
    mask = umask(022);
    umask(mask);
  });
  return mask;
}

// fsync of the directory holding `path`, so that a rename survives a crash (best effort).
void sync_dir_of(const std::string& path) {
  int d = ::open(dir_name(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace

std::string dir_name(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string unpredictable_name(const std::string& dest) {
  std::string dir = dir_name(dest);
  std::string prefix = dest.rfind('/') == std::string::npos ? "" : dir + "/";
  return prefix + "." + base_name(dest) + "." + random_suffix() + ".tmp";
}

TempPath::TempPath(std::string dest) : dest_(std::move(dest)), path_(unpredictable_name(dest_)), hard_stop_(path_) {}

TempPath::TempPath(TempPath&& o) noexcept
    : dest_(std::move(o.dest_)),
      path_(std::move(o.path_)),
      published_(o.published_),
      hard_stop_(std::move(o.hard_stop_)) {
  o.published_ = true;
}

TempPath::~TempPath() {
  if (!published_) ::unlink(path_.c_str());
}

void TempPath::rename_candidate() {
  path_ = unpredictable_name(dest_);
  hard_stop_.hold(path_);
}

void TempPath::publish() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Error(Exit::io, dest_, "cannot reopen the temporary file: " + errno_text(errno));
  bool ok = ::fsync(fd) == 0;
  int err = errno;
  ok = ::fchmod(fd, 0666 & ~process_umask()) == 0 && ok;
  ::close(fd);
  if (!ok) throw Error(Exit::io, dest_, "cannot make the data durable: " + errno_text(err));
  if (std::rename(path_.c_str(), dest_.c_str()) != 0)
    throw Error(Exit::cant_create, dest_, "cannot rename into place: " + errno_text(errno));
  published_ = true;
  hard_stop_.release();
  sync_dir_of(dest_);
}

TempFile::TempFile(const std::string& dest) : tmp_(dest) {
  for (int tries = 0; tries < 100; ++tries, tmp_.rename_candidate()) {
    fd_ = ::open(tmp_.path().c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  int err = errno;
  tmp_.forget();
  throw Error(Exit::cant_create, dest, "cannot create a temporary file beside it: " + errno_text(err));
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
}

void write_all(int fd, const void* data, std::size_t n, const std::string& subject) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(Exit::io, subject, "write failed: " + errno_text(w < 0 ? errno : ENOSPC));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void TempFile::write_all(const void* data, std::size_t n) { files::write_all(fd_, data, n, tmp_.dest()); }

void TempFile::commit() {
  bool ok = ::fsync(fd_) == 0;
  int err = errno;
  if (::close(fd_) != 0 && ok) {
    ok = false;
    err = errno;
  }
  fd_ = -1;
  if (!ok) throw Error(Exit::io, tmp_.dest(), "write failed: " + errno_text(err));
  tmp_.publish();
}

namespace {

// The holder's pid, as it wrote it after taking the lock. A holder that has just taken the lock
// may not have written it yet, so an empty file is read again for up to ~50 ms.
std::string read_holder_pid(int fd) {
  for (int tries = 0; tries < 25; ++tries) {
    char buf[32] = "";
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (!pid.empty()) return pid;
    ::usleep(2000);
  }
  return "";
}

}  // namespace

OutputLock::OutputLock(const std::string& target, const std::string& what) : path_(target + ".lock") {
  for (int tries = 0; tries < 100; ++tries) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) throw Error(Exit::cant_create, path_, "cannot create the lock file: " + errno_text(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      std::string pid = err == EWOULDBLOCK ? read_holder_pid(fd_) : "";
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK) throw Error(Exit::io, path_, "cannot lock: " + errno_text(err));
      throw Error(Exit::temp_failure, target,
                  "in use by another " + what + " run" + (pid.empty() ? "" : " (pid " + pid + ")") +
                      "; try again when it has finished");
    }
    // The holder before us may have removed the file between our open and our lock: the lock
    // counts only when the path still names the inode we locked.
    struct stat mine, now;
    if (::fstat(fd_, &mine) == 0 && ::lstat(path_.c_str(), &now) == 0 && mine.st_dev == now.st_dev &&
        mine.st_ino == now.st_ino) {
      hard_stop_.hold(path_);
      // Temporary files of the target left by a killed holder: no one else may write them now.
      struct stat tmp;
      for (const std::string& left : temp_names_of(target))
        if (::lstat(left.c_str(), &tmp) == 0 && S_ISREG(tmp.st_mode) && tmp.st_uid == ::geteuid() &&
            ::unlink(left.c_str()) == 0)
          ++stale_removed_;
      // Write first, then cut: a reader never sees an empty file once a pid has been written.
      std::string pid = std::to_string(getpid()) + "\n";
      if (::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size()) &&
          ::ftruncate(fd_, static_cast<off_t>(pid.size())) != 0) {
        // the pid is informational only
      }
      return;
    }
    ::close(fd_);
    fd_ = -1;
  }
  throw Error(Exit::temp_failure, target, "cannot take the lock (it keeps being replaced)");
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: a waiter then sees a removed inode and retries
  ::close(fd_);
}

bool make_or_adopt_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) return true;
  if (errno != EEXIST) throw Error(Exit::cant_create, dir, errno_text(errno));
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) throw Error(Exit::cant_create, dir, errno_text(errno));
  if (S_ISLNK(st.st_mode)) throw Error(Exit::cant_create, dir, "is a symbolic link; refusing to use it");
  if (!S_ISDIR(st.st_mode)) throw Error(Exit::cant_create, dir, "exists and is not a directory");
  if (st.st_uid != ::geteuid())
    throw Error(Exit::cant_create, dir,
                "is owned by another user (uid " + std::to_string(st.st_uid) + "); refusing to use it");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw Error(Exit::cant_create, dir, "is writable by other users; refusing to use it");
  return false;
}

std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

Identity identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(Exit::no_input, path, errno_text(errno));
  auto ns = [](const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; };
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
          ns(st.st_mtim), ns(st.st_ctim)};
}

void require_unchanged(const std::string& path, const Identity& was, const std::string& when) {
  bool same = false;
  try {
    same = identity(path) == was;
  } catch (const Error&) {  // gone: changed as much as a file can
  }
  if (!same) throw Error(Exit::temp_failure, path, "changed " + when + " (written or replaced); run again");
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  TempFile tmp(path);
  tmp.write_all(bytes.data(), bytes.size());
  tmp.commit();
}

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

namespace {

// Opens `path` read-only, without blocking (O_NONBLOCK, cleared once the file is known to be
// regular); Error(no_input) for anything but a regular file. With `follow` false a link at `path`
// is not followed and is an I/O error (a link where the tools never make one).
int open_regular(const std::string& path, bool follow) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int err = errno;
    const bool io = err == EIO || err == EMFILE || err == ENFILE || err == ENOMEM || (!follow && err == ELOOP);
    throw Error(io ? Exit::io : Exit::no_input, path, errno_text(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Exit::io, path, errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(
        Exit::no_input, path,
        S_ISDIR(st.st_mode) ? "is a directory" : std::string("not a regular file (") + file_kind(st.st_mode) + ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// The rest of `fd`'s bytes; closes it. Error(io) naming `path` on a read error.
// Read straight into the string, sized from fstat (a file that grows meanwhile is read to its end).
std::string read_all_and_close(int fd, const std::string& path) {
  struct stat st {};
  std::string out;
  out.resize(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 ? static_cast<std::size_t>(st.st_size) + 1
                                                                            : std::size_t{1} << 16);
  std::size_t have = 0;
  while (true) {
    if (have == out.size()) out.resize(out.size() * 2);
    ssize_t n = ::read(fd, &out[have], out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(Exit::io, path, errno_text(err));
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(have);
  return out;
}

}  // namespace

std::string read_file(const std::string& path) { return read_all_and_close(open_regular(path, false), path); }

int open_log(const std::string& path, bool append) {
  const int flags = (append ? O_RDWR | O_APPEND : O_WRONLY) | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  int fd = ::open(path.c_str(), flags, 0666);
  const int err = errno;
  struct stat st {};
  const bool known = fd >= 0 ? ::fstat(fd, &st) == 0 : ::lstat(path.c_str(), &st) == 0;
  std::string why;
  if (known && S_ISLNK(st.st_mode))
    why = "is a symbolic link; refusing to use it";
  else if (known && S_ISDIR(st.st_mode))
    why = "is a directory";
  else if (known && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
    why = std::string("not a regular file (") + file_kind(st.st_mode) + ")";
  else if (fd < 0)
    why = errno_text(err);
  else if (!append && S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0)
    why = "cannot truncate: " + errno_text(errno);
  if (!why.empty()) {
    if (fd >= 0) ::close(fd);
    throw Error(Exit::cant_create, path, why);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int open_input(const std::string& path) { return open_regular(path, true); }

std::string read_input(const std::string& path) { return read_all_and_close(open_input(path), path); }

namespace {

// Removes entry `name` of directory `dir` as remove_tree does; 0 or an errno.
int remove_at(int dir, const char* name) {
  if (unlinkat(dir, name, 0) == 0 || errno == ENOENT) return 0;
  if (errno != EISDIR && errno != EPERM) return errno;  // a directory: EISDIR (Linux) or EPERM
  const int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : errno;
  DIR* d = fdopendir(fd);
  if (!d) {
    const int e = errno;
    close(fd);
    return e;
  }
  int err = 0;
  while (const dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if ((err = remove_at(dirfd(d), e->d_name)) != 0) break;
  }
  closedir(d);
  if (err) return err;
  return unlinkat(dir, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : errno;
}

}  // namespace

int remove_tree(const std::string& path) { return remove_at(AT_FDCWD, path.c_str()); }

std::vector<std::string> temp_names_of(const std::string& dest) {
  std::vector<std::string> out;
  const std::string dir = dir_name(dest), prefix = "." + base_name(dest) + ".";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    // prefix, 12 letters or digits (random_suffix()), ".tmp"
    if (name.size() != prefix.size() + 12 + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".tmp") != 0)
      continue;
    const std::string mid = name.substr(prefix.size(), 12);
    if (std::all_of(mid.begin(), mid.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
      out.push_back(dir == "." && dest.find('/') == std::string::npos ? name : dir + "/" + name);
  }
  ::closedir(d);
  return out;
}

}  // namespace traincache::files
