// Cooperative interruption: SIGINT/SIGTERM set a flag that long-running library loops poll, so
// they can commit progress and return instead of dying mid-write.
#pragma once

namespace traincache {

/// Installs SIGINT and SIGTERM handlers that set the interrupt flag (a second signal kills).
void install_interrupt_handlers();

/// True once SIGINT or SIGTERM arrived (or request_interrupt() was called).
bool interrupt_requested();

/// Sets the flag by hand (tests, or a library caller that wants a clean stop).
void request_interrupt();

/// Clears the flag (tests that request an interrupt and go on).
void clear_interrupt();

/// Once the flag is set: Error(interrupted) "interrupted while <doing>". For loops that have no
/// progress to keep and stop by unwinding (their temporary files removed on the way).
void stop_if_interrupted(const char* doing);

}  // namespace traincache
