// Mixed precision for the engines (docs/gc-train.md, "Mixed precision"): an autocast region and
// the dynamic loss scale of float16 training. Needs LibTorch.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "traincache/model/precision.h"

namespace traincache::model {

/// While alive, operations on `device`'s type run under autocast in `p`'s type, as Python's
/// torch.autocast(device_type, dtype) does (thread-local; nested regions restore the outer one).
/// Nothing for fp32.
class Autocast {
 public:
  Autocast(Precision p, const torch::Device& device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  // The autocast state of the CUDA (cuda) or CPU device type, through the calls of this LibTorch.
  static bool enabled(bool cuda);
  static at::ScalarType dtype(bool cuda);
  static void set(bool cuda, bool enabled, at::ScalarType type);

  bool active_ = false, cuda_ = false, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

/// Float32 math on CUDA: whether cuDNN may run float32 convolutions in TF32 (10-bit mantissa
/// products, float32 sums; Ampere and later). LibTorch, like PyTorch, allows it by default and
/// keeps float32 matrix products in full precision; --no-tf32 turns it off. Process-wide.
void allow_tf32(bool allow);

/// "tf32" when float32 convolutions on `device` may run in TF32 (a CUDA device with TF32
/// allowed; the GPU decides whether it has TF32, Ampere and later do), else "ieee".
const char* math_mode(const torch::Device& device);

/// While alive, TF32 is off (a full-float32 reference); the setting before is restored after.
class FullFloat32 {
 public:
  FullFloat32();
  ~FullFloat32();
  FullFloat32(const FullFloat32&) = delete;
  FullFloat32& operator=(const FullFloat32&) = delete;

 private:
  bool was_;
};

/// The dynamic loss scale of float16 training (as torch.cuda.amp.GradScaler): the loss is
/// multiplied by scale() before back-propagation; unscale() divides the gradients again and says
/// whether they are finite. A step with non-finite gradients is skipped and halves the scale;
/// `growth_interval` finite steps in a row double it.
class GradScaler {
 public:
  explicit GradScaler(bool enabled, double initial = 65536.0, int64_t growth_interval = 2000);
  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? scale_ : 1.0; }
  /// Divides every defined gradient by scale(); true when all are finite afterwards.
  bool unscale(const std::vector<torch::Tensor>& params) const;
  /// After a step: `finite` from unscale(). Returns whether the optimiser step should run.
  bool update(bool finite);
  /// The state a checkpoint keeps: "scale,good_steps", and back.
  std::string state() const;
  void restore(const std::string& state);

 private:
  bool enabled_;
  double scale_;
  int64_t growth_interval_, good_ = 0;
};

}  // namespace traincache::model
