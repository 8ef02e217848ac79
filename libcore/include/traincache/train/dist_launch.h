// The launcher's environment (torchrun, or variables set by hand): which process of a job this is.
// Torch-free, so that tools which only shard work (cache-fill) need no process group.
#pragma once

#include <string>

#include "traincache/base/choices.h"

namespace traincache::train {

/// What the launcher says about this process.
struct Launch {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  ///< torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True)
  int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT (prefix of the agent store's keys)
  bool distributed() const { return world_size > 1; }
};

/// The collective backend asked for: automatic picks NCCL for CUDA devices and Gloo otherwise.
enum class Backend { automatic, gloo, nccl };

/// "auto", "gloo", "nccl".
const Choices<Backend>& backend_choices();

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and torchrun's
/// TORCHELASTIC_* variables. Unset WORLD_SIZE means one process. Malformed or inconsistent values
/// -> Error(usage) naming the variable.
Launch read_launch();

/// The device of this process: under a launcher (world_size > 1) a bare "cuda" is its own GPU,
/// "cuda:LOCAL_RANK", as torchrun's one-process-per-GPU jobs expect; anything else as given.
std::string local_device(const std::string& device, const Launch& launch);

/// Intra-op threads of this process: `threads` when given (> 0); under a launcher with several
/// processes on this machine, its share of the usable cores (`cores` / LOCAL_WORLD_SIZE, at least
/// 1); otherwise 0 (LibTorch's default: one per core).
int local_threads(int threads, const Launch& launch, int cores);

}  // namespace traincache::train
