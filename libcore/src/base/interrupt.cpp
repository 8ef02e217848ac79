#include "traincache/base/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <string>

#include "traincache/base/error.h"

namespace traincache {

namespace {

std::atomic<bool> g_interrupted{false};

// What the first signal writes to stderr: copied here at install, read by the handler.
char g_notice[512];
std::size_t g_notice_size = 0;

// The files a hard stop removes. A slot's path is written before it is marked in use (release
// order), and read by the handler only when it is (acquire): no lock, nothing the handler waits on.
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 taken (being written), 2 registered
  char path[4096];
};
std::array<Slot, 64> g_slots;

extern "C" void on_signal(int sig) {
  if (!g_interrupted.exchange(true)) {
    if (g_notice_size > 0) {
      const ssize_t n = ::write(STDERR_FILENO, g_notice, g_notice_size);
      (void)n;
    }
    return;
  }
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

void install_interrupt_handlers(const std::string& notice) {
  const std::string line = notice.empty() || notice.back() == '\n' ? notice : notice + "\n";
  g_notice_size = std::min(line.size(), sizeof g_notice);
  std::memcpy(g_notice, line.data(), g_notice_size);
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

void HardStopFile::hold(const std::string& path) {
  release();
  if (path.size() >= sizeof(Slot::path)) return;
  for (std::size_t i = 0; i < g_slots.size(); ++i) {
    int free = 0;
    if (!g_slots[i].state.compare_exchange_strong(free, 1, std::memory_order_acquire)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
}

void HardStopFile::release() {
  if (slot_ < 0) return;
  g_slots[static_cast<std::size_t>(slot_)].state.store(0, std::memory_order_release);
  slot_ = -1;
}

}  // namespace traincache
