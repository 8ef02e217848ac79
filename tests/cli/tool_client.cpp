// tool-client SOCKET TOOL [ARGS...]: runs TOOL ARGS as a child of the tool server listening on
// SOCKET (tests/cli/tool_server.cpp), or execs TOOL itself where there is no server or the server
// says so, and ends as the tool did: its exit code, or killed by its signal. Signals sent to the
// client are passed on to the tool. lib.sh's `run` starts the tools that load LibTorch this way.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "tool_wire.h"

extern char** environ;

namespace {

volatile sig_atomic_t tool_pid = 0;
volatile sig_atomic_t early_signal = 0;  // came before the tool's pid: passed on once it is known

void pass_on(int sig) {
  if (tool_pid > 0)
    ::kill(tool_pid, sig);
  else
    early_signal = sig;
}

constexpr int kPassedOn[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM};

std::uint64_t signal_mask(bool ignored) {
  sigset_t blocked;
  ::sigprocmask(SIG_BLOCK, nullptr, &blocked);
  std::uint64_t mask = 0;
  for (int sig = 1; sig < NSIG && sig <= 64; ++sig) {
    struct sigaction sa {};
    const bool set =
        ignored ? ::sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN : ::sigismember(&blocked, sig) == 1;
    if (set) mask |= std::uint64_t{1} << (sig - 1);
  }
  return mask;
}

// The strings of tool_wire.h after the header.
std::string request_strings(int argc, char** argv) {
  std::string s;
  auto add = [&s](const std::string& v) { s.append(v).push_back('\0'); };
  const mode_t mask = ::umask(0);
  ::umask(mask);
  const char* slash = std::strrchr(argv[0], '/');
  add(slash ? slash + 1 : argv[0]);
  add(std::to_string(mask));
  add(std::to_string(signal_mask(true)));
  add(std::to_string(signal_mask(false)));
  std::string limits;
  for (int r = 0; r < RLIM_NLIMITS; ++r) {
    struct rlimit l {};
    ::getrlimit(static_cast<__rlimit_resource_t>(r), &l);
    limits += std::to_string(l.rlim_cur) + " " + std::to_string(l.rlim_max) + " ";
  }
  add(limits);
  add(std::to_string(argc));
  for (int i = 0; i < argc; ++i) add(argv[i]);
  for (char** e = environ; *e; ++e) add(*e);
  return s;
}

bool send_request(int sock, const std::string& strings) {
  tool_wire::Header h{static_cast<std::uint32_t>(strings.size()), 0};
  std::vector<int> fds;
  for (int fd = 0; fd < 3; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) {
      h.std_fds |= 1u << fd;
      fds.push_back(fd);
    }
  const int cwd = ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cwd < 0) return false;
  fds.push_back(cwd);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  iovec iov{&h, sizeof h};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  const bool sent = ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof h);
  ::close(cwd);
  for (std::size_t done = 0; sent && done < strings.size();) {
    const ssize_t n = ::send(sock, strings.data() + done, strings.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return sent;
}

bool read_int(int sock, std::int32_t& v) { return tool_wire::read_exactly(sock, &v, sizeof v); }

// The server's connection, or -1 (no server: the tool runs as a process of its own).
int connect_to(const char* path) {
  sockaddr_un addr;
  if (!tool_wire::unix_address(path, addr)) return -1;
  // Above the standard descriptors: one the caller closed (`run` closes stdin) is sent as closed,
  // not as this connection, which the tool would then hold open after its client was killed.
  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock >= 0 && sock < 3) {
    const int above = ::fcntl(sock, F_DUPFD_CLOEXEC, 3);
    ::close(sock);
    sock = above;
  }
  if (sock >= 0 && ::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return sock;
  if (sock >= 0) ::close(sock);
  return -1;
}

// Ends this process as the tool's wait STATUS says: its exit code, or its signal (no core file).
[[noreturn]] void end_as(int status) {
  if (WIFEXITED(status)) std::_Exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const struct rlimit no_core {};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t only;
  ::sigemptyset(&only);
  ::sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(sig);
  std::_Exit(128 + sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tool-client SOCKET TOOL [ARGS...]\n");
    return 64;
  }
  const int sock = connect_to(argv[1]);
  std::int32_t pid = 0, status = 0;
  if (sock >= 0) {
    // The request carries the dispositions as inherited (a background job's SIGINT ignored); the
    // signals are passed on from before it is sent, so that one sent to this client as soon as the
    // tool runs is not lost (before, it could come between the pid and the handlers).
    const std::string strings = request_strings(argc - 2, argv + 2);
    struct sigaction inherited[std::size(kPassedOn)];
    for (std::size_t i = 0; i < std::size(kPassedOn); ++i) {
      struct sigaction sa {};
      sa.sa_handler = pass_on;
      ::sigaction(kPassedOn[i], &sa, &inherited[i]);  // no SA_RESTART: read_int retries itself
    }
    if (send_request(sock, strings) && read_int(sock, pid) && pid > 0) {
      tool_pid = pid;
      if (early_signal != 0) ::kill(pid, early_signal);
      if (!read_int(sock, status)) {
        std::fprintf(stderr, "tool-client: the tool server ended before %s did\n", argv[2]);
        return 125;
      }
      end_as(status);
    }
    // No tool was started: the tool runs here, with the dispositions it inherited (and a signal
    // that came meanwhile acts as it would have).
    for (std::size_t i = 0; i < std::size(kPassedOn); ++i) ::sigaction(kPassedOn[i], &inherited[i], nullptr);
    if (early_signal != 0) ::raise(early_signal);
    ::close(sock);
  }
  ::execv(argv[2], argv + 2);
  std::fprintf(stderr, "tool-client: %s: %s\n", argv[2], std::strerror(errno));
  return 127;
}
