// Error type and exit codes shared by every traincache library function and tool.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace traincache {

/// Process exit codes. Every tool documents these in its EXIT STATUS section; scripts rely on them.
enum class Exit : int {
  ok = 0,             ///< success
  negative = 1,       ///< a check failed, a verification mismatched, a regression was found
  usage = 64,         ///< bad command line
  data = 65,          ///< bad data: corrupt or foreign file, wrong schema, shape, dtype, NaN
  no_input = 66,      ///< an input file does not exist or cannot be opened
  unavailable = 69,   ///< a resource is unavailable (no CUDA device, slab missing)
  internal = 70,      ///< a bug: an unexpected internal error
  cant_create = 73,   ///< the output cannot be created (or an existing one is in the way)
  io = 74,            ///< an I/O error while reading or writing
  temp_failure = 75,  ///< temporary failure (a lock is held); trying again may succeed
  interrupted = 130,  ///< stopped by SIGINT/SIGTERM; progress was kept where that makes sense
};

/// The one error type the library throws. `what()` is "<subject>: <detail>" (subject may be empty),
/// ready to follow "tool: error: ".
class Error : public std::runtime_error {
 public:
  /// An error about `subject` (a file, dataset or option), with a lower-case `detail`.
  Error(Exit code, const std::string& subject, const std::string& detail)
      : std::runtime_error(subject.empty() ? detail : subject + ": " + detail), code_(code) {}

  /// The exit code a tool should end with.
  Exit code() const noexcept { return code_; }

 private:
  Exit code_;
};

/// strerror(err) with a lower-case first letter, as messages want it.
std::string errno_text(int err);

/// Throws Error(unavailable, what, "needs N of memory but this machine has M") when `count`
/// elements of `element_bytes` exceed the machine's physical memory (or 64 bits): a size read
/// from a file or an option is checked before it is allocated.
void require_memory(const std::string& what, uint64_t count, uint64_t element_bytes);

/// This process's peak resident memory so far, in bytes: VmHWM of /proc/self/status (this
/// program's own pages only; getrusage's ru_maxrss also counts the parent's memory at the fork
/// that started it, so a child of a large process reports its parent's size), or getrusage
/// where /proc is missing.
uint64_t peak_rss_bytes();

}  // namespace traincache
