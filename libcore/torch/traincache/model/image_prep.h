// Images preprocessed where they were decoded (on the GPU, after nvJPEG: issue #47): resize,
// center crop and channels as io::image::preprocess_pixels does them on the CPU, to the bit. Needs
// LibTorch: include only from torch translation units.
#pragma once

#include <torch/types.h>

#include <map>
#include <utility>

#include "traincache/io/image.h"

namespace traincache::model {

/// The preprocessing of `spec` up to its 8-bit samples, on tensors of any device. PIL's resampling
/// is a product with a matrix of its fixed-point weights, in float64 (exact: every sum is an
/// integer below 2^53), rounded and clipped as PIL does after each pass.
class ImagePrep {
 public:
  ImagePrep(io::image::Spec spec, torch::Device device);

  /// `rgb`: uint8 [3, H, W] on the device, as decoded; `orientation`: its EXIF orientation (1-8),
  /// applied when the spec asks for it (exif_transpose). Returns uint8 [C, oh, ow] on the device,
  /// the samples preprocess_pixels gives for the same decoded image.
  torch::Tensor operator()(const torch::Tensor& rgb, int orientation);

 private:
  // x: float64 [C, L, n] resampled along its last axis to `out` samples, rounded and clipped.
  torch::Tensor pass(const torch::Tensor& x, int out);

  io::image::Spec spec_;
  torch::Device device_;
  std::map<std::pair<int, int>, torch::Tensor> weights_;  // (in, out) -> float64 [in, out] on the device, at most 64
};

}  // namespace traincache::model
