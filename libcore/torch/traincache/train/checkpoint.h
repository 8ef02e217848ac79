// gc-train's checkpoint file: the training state (step, parameters, optimiser state, every rank's
// generator state, the settings it was written with) in a LibTorch archive, wrapped in an outer
// archive that carries the inner one's digest, so that a flipped byte is refused on resume instead
// of trained on. Written atomically (temporary name, renamed into place). Needs LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace traincache::train {

/// The format name stored in every checkpoint file.
inline constexpr const char* kFormat = "traincache-checkpoint/2";

/// The default CPU generator's state (the generator dropout and shuffling draw from).
torch::Tensor rng_state();

/// Restores a state returned by rng_state().
void set_rng_state(const torch::Tensor& state);

/// What a checkpoint saves and restores of a run: its trained parameters and the optimiser's state.
struct Trained {
  const std::vector<torch::Tensor>& params;
  torch::optim::Optimizer& opt;
};

/// Writes the training state to `path`. `rngs` holds every rank's generator state, one row per
/// rank ([1, n] for one process); `config` is the settings document a resume must match; `state`
/// is progress a resume carries on (gc-train's best-evaluation record, JSON). Errors:
/// Error(cant_create/io) with the old file left as it was.
void save_checkpoint(const std::string& path, int64_t step, const Trained& trained, const std::string& config,
                     const torch::Tensor& rngs, const std::string& state = "{}");

/// Reads `path` into `trained` (parameters and optimiser), sets this process's generator to rank `rank`'s stored
/// state, and returns the stored step. Refuses (Error(data)) a damaged or foreign file, parameters
/// of other shapes and a `config` other than the stored one (naming the settings that changed);
/// Error(usage) when it was written by another number of processes than `world_size`. The stored
/// `state` goes to `*state` when given ("{}" for a file written without one).
int64_t load_checkpoint(const std::string& path, const Trained& trained, const std::string& config, int rank,
                        int world_size, std::string* state = nullptr);

/// The top-level keys whose values differ between two JSON settings documents, comma-separated
/// ("lr, optimizer"); "unknown" when none differ or `stored` is not a JSON object.
std::string checkpoint_config_diff(const std::string& stored, const std::string& now);

}  // namespace traincache::train
