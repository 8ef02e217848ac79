// Cooperative interruption: SIGINT/SIGTERM set a flag that long-running library loops poll, so
// they can commit progress and return instead of dying mid-write.
#pragma once

#include <string>

namespace traincache {

/// Installs SIGINT and SIGTERM handlers. The first signal sets the interrupt flag and writes
/// `notice` (a line saying what happens now, e.g. "tool: interrupted: stopping after this batch;
/// interrupt again to stop at once"; none when null or empty) to stderr at once; a second one
/// removes the files registered as HardStopFile (temporary files, lock files) and ends the process
/// by that signal.
void install_interrupt_handlers(const std::string& notice = "");

/// True once SIGINT or SIGTERM arrived (or request_interrupt() was called).
bool interrupt_requested();

/// Sets the flag by hand (tests, or a library caller that wants a clean stop).
void request_interrupt();

/// Clears the flag (tests that request an interrupt and go on).
void clear_interrupt();

/// Once the flag is set: Error(interrupted) "interrupted while <doing>". For loops that have no
/// progress to keep and stop by unwinding (their temporary files removed on the way).
void stop_if_interrupted(const char* doing);

/// A file the process removes if a second signal ends it (a temporary file not yet renamed into
/// place, a lock file), registered while this object holds it. Up to 64 are held at a time (more
/// are not registered: they are left, as without this, by a process killed outright).
class HardStopFile {
 public:
  HardStopFile() = default;
  explicit HardStopFile(const std::string& path) { hold(path); }
  HardStopFile(HardStopFile&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  HardStopFile(const HardStopFile&) = delete;
  HardStopFile& operator=(const HardStopFile&) = delete;
  HardStopFile& operator=(HardStopFile&&) = delete;
  ~HardStopFile() { release(); }
  /// Registers `path` instead of the path held before, if any.
  void hold(const std::string& path);
  /// No longer removed at a hard stop (renamed into place, or removed already).
  void release();

 private:
  int slot_ = -1;
};

}  // namespace traincache
