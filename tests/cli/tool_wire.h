// The requests between tests/cli/tool_client.cpp and tests/cli/tool_server.cpp (lib.sh's `run` of
// a tool that loads LibTorch): one Unix stream connection per tool run.
//
// Client to server: one sendmsg of a Header, with the descriptors it names attached (SCM_RIGHTS:
// those of 0, 1 and 2 the client has open, in that order, then its working directory), then
// Header::bytes of NUL-ended strings: the tool's name, umask, ignored signals, blocked signals (the
// masks as decimal numbers, bit N-1 for signal N), the resource limits ("cur max" for each of
// RLIMIT 0..RLIM_NLIMITS-1), argc, argv[0..argc-1], then the environment, one entry a string.
// Server to client: the tool's pid (an int32; 0: run the tool yourself), then its wait status (an
// int32) when it has ended.
#pragma once

#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace tool_wire {

struct Header {
  std::uint32_t bytes;    // the strings that follow
  std::uint32_t std_fds;  // bit N: descriptor N (0-2) was open and is attached
};

/// ADDR for the socket at PATH; false when PATH is too long for one.
inline bool unix_address(const char* path, sockaddr_un& addr) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof addr.sun_path) return false;
  std::strcpy(addr.sun_path, path);
  return true;
}

/// Reads N bytes from FD into P (again after a signal); false at an error or the end first.
inline bool read_exactly(int fd, void* p, std::size_t n) {
  for (std::size_t done = 0; done < n;) {
    const ssize_t got = ::read(fd, static_cast<char*>(p) + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace tool_wire
