// Shared by the libFuzzer harnesses: where a harness writes its input, and which outcomes count.
// A harness passes when the code under test returns or throws traincache::Error (a clean refusal
// that the tools turn into one line and an exit code). Anything else — another exception type
// (the tools would exit 70), a sanitizer report, a signal — is a finding.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fuzz {

/// Replaces `path` with exactly `size` bytes of `data`; aborts when the file cannot be written
/// (a broken harness, not a finding).
inline void write_input(const std::string& path, const uint8_t* data, std::size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) std::abort();
}

/// A private directory for this process's inputs (under $TMPDIR or /tmp), made once and removed
/// with its files at exit.
inline const std::string& work_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tc-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    return tmpl;
  }();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(work_dir(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

}  // namespace fuzz
