// Shared-memory names of a unit test's own: TRAINCACHE_SHM_PREFIX is TAG-PID- while a ShmPrefix
// lives, and every slab under that prefix is removed when it goes, so that tests running at once,
// and slabs a failed test left, never meet.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "traincache/slab/shm_slab.h"

namespace traincache::test {

class ShmPrefix {
 public:
  explicit ShmPrefix(const std::string& tag) {
    ::setenv("TRAINCACHE_SHM_PREFIX", (tag + "-" + std::to_string(::getpid()) + "-").c_str(), 1);
  }
  ~ShmPrefix() {
    for (const auto& name : slab::list_slabs()) slab::remove_slab(name);
  }
  ShmPrefix(const ShmPrefix&) = delete;
  ShmPrefix& operator=(const ShmPrefix&) = delete;
};

}  // namespace traincache::test
