// Creating outputs safely: temporary files with unpredictable names, created exclusively and never
// through a symbolic link, renamed into place when complete; advisory locks that make a second run
// on the same output fail fast; checks before adopting a directory left by an earlier run.
// Torch-free. What each tool promises under faults: docs/design.md.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "traincache/base/interrupt.h"

namespace traincache::files {

/// Removes `path` and, when it is a directory, everything in it, never following a symbolic link
/// (a link is removed itself). A path that does not exist is no error. Returns 0 or the errno of
/// the first failure. POSIX calls only: torch-linked tools must not call std::filesystem, whose
/// copies pip's libtorch.so exports (docs/gpu.md).
int remove_tree(const std::string& path);

/// The entries beside `dest` named as unpredictable_name(dest) names them (".NAME.<12 letters or
/// digits>.tmp"), as paths: what runs that were killed may have left.
std::vector<std::string> temp_names_of(const std::string& dest);

/// A temporary name in `dest`'s directory that nobody can predict: "<dir>/.<base>.<random>.tmp".
/// Nothing is created; callers create it exclusively (O_EXCL, or H5F_ACC_EXCL) and retry on EEXIST.
std::string unpredictable_name(const std::string& dest);

/// A temporary path that is removed when the object dies unless publish() renamed it into place.
/// For files written by other libraries (HDF5, which creates `path()` itself with H5F_ACC_EXCL).
class TempPath {
 public:
  /// A fresh unpredictable name beside `dest` (nothing is created yet).
  explicit TempPath(std::string dest);
  TempPath(TempPath&& o) noexcept;
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  TempPath& operator=(TempPath&&) = delete;
  ~TempPath();

  /// The temporary file's path.
  const std::string& path() const { return path_; }
  /// The final path.
  const std::string& dest() const { return dest_; }
  /// Picks another unpredictable name (after the previous one turned out to exist).
  void rename_candidate();
  /// Stops owning the path: it is not removed on destruction (it was never created by us).
  void forget() {
    published_ = true;
    hard_stop_.release();
  }
  /// Makes the file durable (fsync, without following a link), gives it the permissions a new
  /// file gets (0666 less the umask) and renames it to dest(); Error(io/cant_create) on failure.
  void publish();

 private:
  std::string dest_, path_;
  bool published_ = false;
  HardStopFile hard_stop_;  // removed if a second signal ends the process
};

/// A temporary file opened by this process (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600) beside `dest`,
/// written with write_all() and published by commit(); removed on destruction unless committed.
class TempFile {
 public:
  /// Creates the file; Error(cant_create) naming `dest` when the directory does not allow it.
  explicit TempFile(const std::string& dest);
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();

  /// The descriptor (valid until commit()).
  int fd() const { return fd_; }
  /// The temporary path.
  const std::string& path() const { return tmp_.path(); }
  /// Writes every byte (looping over short writes); Error(io) naming dest on failure (ENOSPC...).
  void write_all(const void* data, std::size_t n);
  /// fsync, close (checked), permissions as for a new file, rename into place.
  void commit();

 private:
  TempPath tmp_;
  int fd_ = -1;
};

/// An advisory lock (flock) on "<target>.lock", held until destruction, when the lock file is
/// removed. A second holder fails at once with Error(temp_failure) naming the holder's pid.
class OutputLock {
 public:
  /// Locks `target` for `what` ("cache-fill", "gc-train"); never follows a link at the lock path.
  OutputLock(const std::string& target, const std::string& what);
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  ~OutputLock();

  /// The lock file's path.
  const std::string& path() const { return path_; }
  /// Temporary files of the target (unpredictable_name()'s, beside it) that a run killed before
  /// it could remove them had left, removed once the lock was taken: only a holder of the lock
  /// writes them, so none can be in use.
  int stale_removed() const { return stale_removed_; }

 private:
  std::string path_;
  int fd_ = -1;
  int stale_removed_ = 0;
  HardStopFile hard_stop_;  // removed if a second signal ends the process
};

/// Opens a log that is written through line by line (gc-train's --metrics, --batch-log): created
/// (0666 less the umask) or truncated, or appended to with `append` (then opened for reading too,
/// so that a resumed run can read back what it appends to). A link at `path` is never
/// followed and anything but a regular file or a character device (/dev/null) is refused, both
/// Error(cant_create) naming `path`; the open never blocks (a FIFO). Returns the descriptor.
int open_log(const std::string& path, bool append);

/// Writes every byte to `fd`, looping over short writes and EINTR; Error(io, subject,
/// "write failed: ...") on failure (ENOSPC, EIO...).
void write_all(int fd, const void* data, std::size_t n, const std::string& subject);

/// Creates directory `dir` (mode 0700) or checks that an existing one may be trusted: a real
/// directory (not a link), owned by this user and not writable by group or others. Throws
/// Error(cant_create) with the reason otherwise. Returns true when it was created.
bool make_or_adopt_private_dir(const std::string& dir);

/// `path` with links, "." and ".." resolved (realpath); `path` itself when it names no file.
std::string absolute_path(const std::string& path);

/// True when `a` and `b` name the same file (same device and inode); false if either is missing.
bool same_file(const std::string& a, const std::string& b);

/// What tells a file from the one it was: device, inode, size, modification and change times (the
/// change time follows every write and cannot be set back). Equal before and after reading it:
/// no writer and no replacement came between, as far as the clock's tick shows.
struct Identity {
  uint64_t dev = 0, ino = 0;
  int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const Identity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
  bool operator!=(const Identity& o) const { return !(*this == o); }
};

/// `path`'s Identity (following links, as a read does); Error(no_input) when it cannot be stat'ed.
Identity identity(const std::string& path);

/// Throws Error(temp_failure) about `path` when its identity is no longer `was`: it changed `when`
/// ("while its digest was computed"), so what was read of it may not be what the rest reads.
void require_unchanged(const std::string& path, const Identity& was, const std::string& when);

/// Writes `bytes` to `path` through a TempFile renamed into place when complete; Error(cant_create/io)
/// on failure (a full disk), with any old file at `path` left as it was.
void write_file_atomically(const std::string& path, const std::string& bytes);

/// Reads a whole regular file (O_NOFOLLOW); Error(no_input/io) on failure.
std::string read_file(const std::string& path);

/// Opens an input file for reading, links followed (datasets are often linked into place), never
/// blocking: a FIFO, a device, a socket or a directory is refused with Error(no_input, path,
/// "not a regular file (a FIFO)"). Failing to open it (missing, a link loop, no permission) is
/// Error(no_input) too, the read side's code; only EIO and running out of descriptors are Error(io).
int open_input(const std::string& path);

/// The whole of a regular input file, opened with open_input(); Error(io) on a read error.
std::string read_input(const std::string& path);

/// What a file of st_mode `mode` that is not a regular one is, for messages: "a FIFO", "a socket",
/// "a character device", "a block device", "not a file".
const char* file_kind(mode_t mode);

/// The directory part of `path` ("." when it has none).
std::string dir_name(const std::string& path);

}  // namespace traincache::files
