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

}  // namespace traincache
