#include "setup.h"

#include <algorithm>

#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/model/encode.h"
#include "traincache/model/precision_torch.h"

namespace traincache::train {

Setup resolve_setup(const TrainOptions& o) {
  Setup s;
  s.launch = train::read_launch();
  s.rank = s.launch.rank;
  s.world = s.launch.world_size;
  s.device = model::parse_device(o.device);
  // One GPU per process: a bare "cuda" means the launcher's LOCAL_RANK (checked once connected),
  // not at parse: a missing GPU must fail once every rank is connected (cache-fill, whose ranks
  // share no process group, takes train::local_device instead).
  if (s.launch.distributed() && s.device.is_cuda() && !s.device.has_index()) {
    s.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(s.launch.local_rank));
    s.device_from_local_rank = true;
  }
  s.cache_device = model::parse_device(o.cache_device, "--cache-device");
  model::allow_tf32(o.tf32);
  // Processes of one machine share its cores unless --threads says otherwise.
  model::configure_threads(train::local_threads(o.threads, s.launch, static_cast<int>(usable_cores())));
  validate_options(o);
  model::check_precision(o.precision, s.device.is_cuda(), "--precision");
  s.float_type = o.dtype == DType::f64 ? torch::kFloat64 : torch::kFloat32;
  s.cached = !o.cache.empty();
  s.objective = resolve_objective(o, grouped_mode(o));
  validate_selection(o, s.objective);
  return s;
}

// Data parallelism: every rank connects to the job's store before anything can fail on one rank
// only, so that such a failure reaches the others (report_failure) instead of leaving them waiting.
// What every rank decides alike (options, the backend) is checked before, without waiting.
std::unique_ptr<train::RankGroup> connect(const TrainOptions& o, const Setup& s, TrainResult& result) {
  if (!s.launch.distributed()) return nullptr;
  train::Backend backend = train::choose_backend(o.dist_backend, s.device);
  if (o.batch_size < s.world)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " rows cannot be shared by " + std::to_string(s.world) + " ranks");
  auto group = std::make_unique<train::RankGroup>(
      s.launch, backend, std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)), s.device);
  result.backend = train::backend_choices().name(backend);
  return group;
}

// This rank's own resources, once connected: its GPU (a device index that does not exist is 69
// before any model is loaded).
void check_local_device(const Setup& s) {
  if (s.device_from_local_rank)
    model::require_device_index(s.device, "--device cuda (LOCAL_RANK " + std::to_string(s.launch.local_rank) + ")");
}

}  // namespace traincache::train
