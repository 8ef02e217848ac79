#include "traincache/model/precision_torch.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>

#include "traincache/base/error.h"

namespace traincache::model {

Autocast::Autocast(Precision p, const torch::Device& device) {
  if (p == Precision::fp32 || p == Precision::int8) return;  // int8: no autocast (model/int8.h)
  active_ = true;
  cuda_ = device.is_cuda();
  const at::ScalarType type = p == Precision::bf16 ? at::kBFloat16 : at::kHalf;
  was_enabled_ = enabled(cuda_);
  was_dtype_ = dtype(cuda_);
  set(cuda_, true, type);
  at::autocast::increment_nesting();
}

// LibTorch 2.4 replaced the per-device calls (is_enabled, is_cpu_enabled, ...: deprecated since,
// a warning at every call) with ones that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool Autocast::enabled(bool cuda) { return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU); }
at::ScalarType Autocast::dtype(bool cuda) { return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU); }
void Autocast::set(bool cuda, bool enabled, at::ScalarType type) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, type);
}
#else
bool Autocast::enabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
at::ScalarType Autocast::dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void Autocast::set(bool cuda, bool enabled, at::ScalarType type) {
  if (cuda) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(type);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(type);
  }
}
#endif

Autocast::~Autocast() {
  if (!active_) return;
  // The cast weights are cached for the outermost region only, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set(cuda_, was_enabled_, was_dtype_);
}

void allow_tf32(bool allow) { at::globalContext().setAllowTF32CuDNN(allow); }

const char* math_mode(const torch::Device& device) {
  return device.is_cuda() && at::globalContext().allowTF32CuDNN() ? "tf32" : "ieee";
}

FullFloat32::FullFloat32() : was_(at::globalContext().allowTF32CuDNN()) { allow_tf32(false); }
FullFloat32::~FullFloat32() { allow_tf32(was_); }

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

}  // namespace traincache::model
