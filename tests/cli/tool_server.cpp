// tool-server SOCKET: the process behind tests/cli/lib.sh's `run` of cache-fill, gc-train,
// smart-bench and cache-inspect. It loads libtraincache_engines.so (LibTorch) once, as a tool does
// when it first needs it (traincache::engines_symbol), then listens on SOCKET; for each request of
// tests/cli/tool_client.cpp it forks a child that becomes the tool run as a process of its own
// would be (argv, environment, working directory, standard descriptors, umask, resource limits,
// ignored and blocked signals, the other descriptors closed) and calls that tool's main(), compiled
// into this program (tests/CMakeLists.txt). A tool start is then a fork instead of loading LibTorch,
// ~0.5 CPU seconds each, ~500 a run of the suite (docs/design.md, "The suite's time").
//
// A request whose environment sets a variable that libraries read as they load (kReadAtLoad)
// otherwise than the server's is answered "run it yourself": the client execs the tool.
//
// Readiness and end: the server writes "ready" on its standard output (lib.sh reads it from a FIFO)
// once it listens, and ends, killing what it still runs, when every reader of that output has
// closed it (the script has ended). Its children die with it (PR_SET_PDEATHSIG).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tool_wire.h"
#include "traincache/base/module.h"

extern char** environ;

int tc_main_cache_fill(int argc, char** argv);
int tc_main_cache_inspect(int argc, char** argv);
int tc_main_gc_train(int argc, char** argv);
int tc_main_smart_bench(int argc, char** argv);

namespace {

struct Tool {
  const char* name;
  int (*main)(int, char**);
};
constexpr Tool kTools[] = {{"cache-fill", tc_main_cache_fill},
                           {"cache-inspect", tc_main_cache_inspect},
                           {"gc-train", tc_main_gc_train},
                           {"smart-bench", tc_main_smart_bench}};

// Prefixes of the variables that libraries read once, as they load: a child of this server would
// see them as they were when the server loaded. One list for this server and py_server.py
// (read_at_load.txt, made into read_at_load.inc by tests/CMakeLists.txt).
constexpr const char* kReadAtLoad[] = {
#include "read_at_load.inc"
};

struct Request {
  const Tool* tool = nullptr;
  mode_t umask = 022;
  std::uint64_t ignored = 0, blocked = 0;
  std::vector<rlimit> limits;
  std::vector<std::string> argv, env;
  unsigned std_fds = 0;
  std::vector<int> fds;  // the attached standard descriptors in order, then the working directory
};

std::map<std::string, std::string> read_at_load(const std::vector<std::string>& env) {
  std::map<std::string, std::string> vars;
  for (const auto& e : env)
    for (const char* prefix : kReadAtLoad)
      if (e.compare(0, std::strlen(prefix), prefix) == 0) {
        const auto eq = e.find('=');
        vars[e.substr(0, eq)] = eq == std::string::npos ? "" : e.substr(eq + 1);
        break;
      }
  return vars;
}

// The first variable of WANT or GOT that the other lacks or sets otherwise ("NAME differs"), or "".
std::string first_difference(const std::map<std::string, std::string>& got,
                             const std::map<std::string, std::string>& want) {
  for (const auto* m : {&got, &want})
    for (const auto& [name, value] : *m) {
      const auto& other = m == &got ? want : got;
      const auto it = other.find(name);
      if (it == other.end() || it->second != value) return name + " differs";
    }
  return "";
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

// The header and its descriptors (kept in r.fds whatever comes of the rest).
bool read_header(int sock, tool_wire::Header& h, Request& r) {
  char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{&h, sizeof h};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      r.fds.push_back(fd);
    }
  }
  r.std_fds = h.std_fds;
  const auto attached = static_cast<std::size_t>(__builtin_popcount(h.std_fds & 7u)) + 1;
  return n == static_cast<ssize_t>(sizeof h) && r.fds.size() == attached && h.bytes < (64u << 20);
}

// The request's strings S (tool_wire.h) into R; false (or std::stoul's exceptions) when malformed.
bool parse_request(const std::vector<std::string>& s, Request& r) {
  if (s.size() < 6) return false;
  for (const Tool& t : kTools)
    if (s[0] == t.name) r.tool = &t;
  r.umask = static_cast<mode_t>(std::stoul(s[1]));
  r.ignored = std::stoull(s[2]);
  r.blocked = std::stoull(s[3]);
  std::istringstream limits(s[4]);
  for (rlimit l{}; limits >> l.rlim_cur >> l.rlim_max;) r.limits.push_back(l);
  const std::size_t argc = std::stoul(s[5]);
  if (argc == 0 || argc > s.size() - 6) return false;
  r.argv.assign(s.begin() + 6, s.begin() + 6 + static_cast<std::ptrdiff_t>(argc));
  r.env.assign(s.begin() + 6 + static_cast<std::ptrdiff_t>(argc), s.end());
  return true;
}

// One request from SOCK (tool_wire.h); false when it is malformed.
bool read_request(int sock, Request& r) {
  tool_wire::Header h{};
  if (!read_header(sock, h, r)) return false;
  std::string bytes(h.bytes, '\0');
  if (!tool_wire::read_exactly(sock, bytes.data(), bytes.size())) return false;
  std::vector<std::string> s;
  for (std::size_t at = 0, end; at < bytes.size(); at = end + 1) {
    if ((end = bytes.find('\0', at)) == std::string::npos) return false;
    s.push_back(bytes.substr(at, end - at));
  }
  try {
    return parse_request(s, r);
  } catch (const std::exception&) {  // a number that is none
    return false;
  }
}

// Closes every descriptor from 3 up but those in KEEP (sorted).
void close_all_but(const std::vector<int>& keep) {
  unsigned from = 3;
  for (int fd : keep) {
    if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
    from = std::max(from, static_cast<unsigned>(fd) + 1);
  }
  ::close_range(from, ~0u, 0);
}

// The descriptors open now, from 3 up (those that libraries opened as they loaded).
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return fds;
  for (dirent* e; (e = ::readdir(d));)
    if (const int fd = std::atoi(e->d_name); fd >= 3 && fd != ::dirfd(d)) fds.push_back(fd);
  ::closedir(d);
  std::sort(fds.begin(), fds.end());
  return fds;
}

void set_signals(std::uint64_t ignored, std::uint64_t blocked) {
  sigset_t mask;
  ::sigemptyset(&mask);
  for (int sig = 1; sig < NSIG && sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    const std::uint64_t bit = std::uint64_t{1} << (sig - 1);
    ::signal(sig, (ignored & bit) ? SIG_IGN : SIG_DFL);
    if (blocked & bit) ::sigaddset(&mask, sig);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
}

// In the child: becomes the process R describes and runs its tool; never returns.
[[noreturn]] void become(Request& r, const std::vector<int>& keep) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::size_t k = 0;
  for (int fd = 0; fd < 3; ++fd)
    if (r.std_fds & (1u << fd)) {
      ::dup2(r.fds[k++], fd);
    } else {
      ::close(fd);
    }
  if (::fchdir(r.fds[k]) != 0) {
    std::fprintf(stderr, "tool-server: cannot enter the caller's directory: %s\n", std::strerror(errno));
    std::_Exit(126);
  }
  close_all_but(keep);
  ::umask(r.umask);
  for (std::size_t i = 0; i < r.limits.size(); ++i) ::setrlimit(static_cast<__rlimit_resource_t>(i), &r.limits[i]);
  auto* env = new std::vector<char*>;  // never destroyed: getenv() may be called as the process ends
  for (auto& e : r.env) env->push_back(e.data());
  env->push_back(nullptr);
  environ = env->data();
  set_signals(r.ignored, r.blocked);
  std::vector<char*> argv;
  for (auto& a : r.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int status = r.tool->main(static_cast<int>(r.argv.size()), argv.data());
  // A tool that returns from main() (its --help, a refusal of its options) has loaded nothing and
  // left nothing to a destructor; this process has LibTorch loaded, whose static destructors take
  // ~0.1 s: stdout and stderr are flushed and the process ends without them, as the tools end
  // their runs (cli::run_tool).
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
}

struct Running {
  pid_t pid;
  int client;
  bool killed;
};

bool send_int(int sock, std::int32_t v) {
  return ::send(sock, &v, sizeof v, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof v);
}

// Takes one connection's request: a child runs it, or the client is told to run it itself.
void take(int listener, std::vector<Running>& running, const std::vector<int>& keep,
          const std::map<std::string, std::string>& loaded_with) {
  const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  const timeval patience{10, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  Request r;
  pid_t pid = -1;
  const bool read = read_request(client, r);
  const std::string differs = read ? first_difference(read_at_load(r.env), loaded_with) : "";
  if (read && r.tool && differs.empty()) {
    std::fflush(nullptr);
    if ((pid = ::fork()) == 0) become(r, keep);
  }
  if (pid > 0) {
    std::fprintf(stderr, "tool-server: %s: pid %d\n", r.tool->name, static_cast<int>(pid));
  } else {
    std::fprintf(stderr, "tool-server: %s: run by the client: %s\n", read ? r.argv[0].c_str() : "?",
                 !read     ? "a malformed request"
                 : !r.tool ? "not a tool of this server"
                           : differs.c_str());
  }
  for (int fd : r.fds) ::close(fd);
  if (pid > 0) {
    const bool told = send_int(client, pid);
    if (!told) ::kill(pid, SIGKILL);
    running.push_back({pid, client, !told});
    return;
  }
  send_int(client, 0);
  ::close(client);
}

// Hands each ended child's wait status to its client.
void reap(std::vector<Running>& running) {
  int status;
  for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
    auto it = std::find_if(running.begin(), running.end(), [pid](const Running& r) { return r.pid == pid; });
    if (it == running.end()) continue;
    send_int(it->client, status);
    ::close(it->client);
    running.erase(it);
  }
}

int serve(int listener, const std::vector<int>& keep, const std::map<std::string, std::string>& loaded_with) {
  sigset_t chld;
  ::sigemptyset(&chld);
  ::sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int children = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  std::vector<Running> running;
  for (;;) {
    std::vector<pollfd> p = {{1, 0, 0}, {listener, POLLIN, 0}, {children, POLLIN, 0}};
    for (const auto& r : running) p.push_back({r.killed ? -1 : r.client, POLLIN, 0});
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[0].revents) break;  // no reader of the readiness FIFO is left: the script has ended
    for (std::size_t i = 0; i < running.size(); ++i)
      if (p[3 + i].revents && !running[i].killed) {  // the client went away (killed) before its tool
        ::kill(running[i].pid, SIGKILL);
        running[i].killed = true;
      }
    if (p[2].revents) {
      signalfd_siginfo info;
      while (::read(children, &info, sizeof info) > 0) {
      }
      reap(running);
    }
    if (p[1].revents & POLLIN) take(listener, running, keep, loaded_with);
  }
  for (const auto& r : running) ::kill(r.pid, SIGKILL);
  return 0;
}

int listen_on(const char* path) {
  sockaddr_un addr;
  if (!tool_wire::unix_address(path, addr)) return -1;
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 64) != 0) return -1;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tool-server SOCKET\n");
    return 64;
  }
  ::close_range(3, ~0u, 0);  // nothing of the script's (another server's FIFOs) is held open here
  ::signal(SIGPIPE, SIG_IGN);
  const auto loaded_with = read_at_load(current_environment());
  try {
    // CUDA's module first, as a tool whose options name a CUDA device loads it (base/module.h):
    // a served --device cuda then finds CUDA as a tool of its own would.
    traincache::load_cuda_module();
    traincache::engines_symbol("tc_fill_encode");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tool-server: %s\n", e.what());
    return 69;
  }
  const std::vector<int> keep = open_descriptors();
  const int listener = listen_on(argv[1]);
  if (listener < 0) {
    std::fprintf(stderr, "tool-server: %s: %s\n", argv[1], std::strerror(errno));
    return 73;
  }
  if (std::printf("ready\n") < 0 || std::fflush(stdout) != 0) return 0;
  return serve(listener, keep, loaded_with);
}
