#include "traincache/autocast.h"

#include <ATen/autocast_mode.h>

#include <cstdio>
#include <cstdlib>

#include "traincache/error.h"

namespace traincache::precision {

void check(Precision p, const torch::Device& device, const std::string& option) {
  if (p == Precision::fp16 && !device.is_cuda())
    throw Error(Exit::usage, option,
                "fp16 needs a CUDA device (LibTorch's CPU autocast runs bfloat16 only); use bf16 on the CPU");
}

Autocast::Autocast(Precision p, const torch::Device& device) {
  if (p == Precision::fp32) return;
  active_ = true;
  cuda_ = device.is_cuda();
  const at::ScalarType type = p == Precision::bf16 ? at::kBFloat16 : at::kHalf;
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(type);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(type);
  }
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  // The cast weights are cached for the outermost region only, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
}

GradScaler::GradScaler(bool enabled, double initial, int64_t growth_interval)
    : enabled_(enabled), scale_(initial), growth_interval_(growth_interval) {}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) const {
  if (!enabled_) return true;
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    p.mutable_grad().div_(scale_);
    finite = finite && torch::isfinite(p.grad()).all().item<bool>();
  }
  return finite;
}

bool GradScaler::update(bool finite) {
  if (!enabled_) return true;
  if (!finite) {
    scale_ /= 2;
    good_ = 0;
    return false;
  }
  if (++good_ >= growth_interval_) {
    scale_ *= 2;
    good_ = 0;
  }
  return true;
}

std::string GradScaler::state() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g,%lld", scale_, static_cast<long long>(good_));
  return buf;
}

void GradScaler::restore(const std::string& state) {
  char* end = nullptr;
  const double s = std::strtod(state.c_str(), &end);
  if (end == state.c_str() || *end != ',' || !(s > 0))
    throw Error(Exit::data, "checkpoint", "damaged loss-scale state '" + state + "'");
  scale_ = s;
  good_ = std::strtoll(end + 1, nullptr, 10);
}

}  // namespace traincache::precision
