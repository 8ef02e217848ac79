#include "traincache/base/interrupt.h"

#include <atomic>
#include <csignal>
#include <string>

#include "traincache/base/error.h"

namespace traincache {

namespace {
std::atomic<bool> g_interrupted{false};

extern "C" void on_signal(int sig) {
  if (g_interrupted.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() { return g_interrupted.load(std::memory_order_relaxed); }

void request_interrupt() { g_interrupted = true; }

void clear_interrupt() { g_interrupted = false; }

void stop_if_interrupted(const char* doing) {
  if (interrupt_requested()) throw Error(Exit::interrupted, "", std::string("interrupted while ") + doing);
}

}  // namespace traincache
