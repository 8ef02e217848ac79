#include "traincache/train/dist_launch.h"

#include <algorithm>
#include <cstdlib>

#include "traincache/base/error.h"
#include "traincache/base/format.h"

namespace traincache::train {

namespace {

// The integer in environment variable `name`, `fallback` when unset; Error(usage) when malformed.
int env_int(const char* name, int fallback, int min) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  auto n = parse_int(v);
  if (!n || *n < min || *n > 1 << 30)
    throw Error(Exit::usage, name, "expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return static_cast<int>(*n);
}

}  // namespace

const Choices<Backend>& backend_choices() {
  static const Choices<Backend> c{{Backend::automatic, "auto"}, {Backend::gloo, "gloo"}, {Backend::nccl, "nccl"}};
  return c;
}

Launch read_launch() {
  Launch l;
  l.world_size = env_int("WORLD_SIZE", 1, 1);
  if (!l.distributed()) return l;
  if (!std::getenv("RANK")) throw Error(Exit::usage, "WORLD_SIZE", "is set but RANK is not");
  l.rank = env_int("RANK", 0, 0);
  if (l.rank >= l.world_size)
    throw Error(Exit::usage, "RANK",
                std::to_string(l.rank) + " is not below WORLD_SIZE " + std::to_string(l.world_size));
  l.local_rank = env_int("LOCAL_RANK", 0, 0);
  l.local_world_size = env_int("LOCAL_WORLD_SIZE", 1, 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) l.master_addr = a;
  l.master_port = env_int("MASTER_PORT", 29500, 1);
  if (l.master_port > 65535) throw Error(Exit::usage, "MASTER_PORT", "is not a port number");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  l.agent_store = agent && std::string(agent) == "True";
  l.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0);
  return l;
}

std::string local_device(const std::string& device, const Launch& launch) {
  return launch.distributed() && device == "cuda" ? "cuda:" + std::to_string(launch.local_rank) : device;
}

int local_threads(int threads, const Launch& launch, int cores) {
  if (threads > 0 || launch.local_world_size <= 1) return threads;
  return std::max(1, cores / launch.local_world_size);
}

}  // namespace traincache::train
