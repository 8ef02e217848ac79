#include "traincache/model/image_prep.h"

#include <torch/torch.h>

namespace traincache::model {

namespace {

// [C, H, W] turned as io::image::apply_orientation turns an image with EXIF orientation o.
torch::Tensor oriented(const torch::Tensor& t, int o) {
  switch (o) {
    case 2:
      return t.flip({2});
    case 3:
      return t.flip({1, 2});
    case 4:
      return t.flip({1});
    case 5:
      return t.transpose(1, 2);
    case 6:
      return t.transpose(1, 2).flip({2});
    case 7:
      return t.transpose(1, 2).flip({1, 2});
    case 8:
      return t.transpose(1, 2).flip({1});
    default:
      return t;
  }
}

// PIL's convert("L") of uint8 [3, H, W]: its luma weights in 16-bit fixed point, rounded.
torch::Tensor luma(const torch::Tensor& rgb) {
  const auto c = rgb.to(torch::kInt);
  return (c[0] * 19595 + c[1] * 38470 + c[2] * 7471 + 0x8000).div(65536, "floor").unsqueeze(0).to(torch::kByte);
}

}  // namespace

ImagePrep::ImagePrep(io::image::Spec spec, torch::Device device) : spec_(std::move(spec)), device_(device) {}

torch::Tensor ImagePrep::pass(const torch::Tensor& x, int out) {
  const int in = static_cast<int>(x.size(2));
  auto it = weights_.find({in, out});
  if (it == weights_.end()) {
    // Photos of many sizes would keep a matrix per size: bounded (64 of 4,000 x 256 take 0.5 GB).
    if (weights_.size() >= 64) weights_.clear();
    auto m = torch::tensor(io::image::bilinear_weights(in, out), torch::kInt).reshape({out, in});
    it = weights_.emplace(std::pair{in, out}, m.to(torch::kDouble).t().contiguous().to(device_)).first;
  }
  const double half = static_cast<double>(int64_t{1} << (io::image::kResampleBits - 1));
  const double one = static_cast<double>(int64_t{1} << io::image::kResampleBits);
  return x.matmul(it->second).add_(half).div_(one).floor_().clamp_(0, 255);
}

torch::Tensor ImagePrep::operator()(const torch::Tensor& rgb, int orientation) {
  torch::Tensor t = spec_.exif_transpose ? oriented(rgb, orientation) : rgb;
  if (spec_.channels == io::image::Channels::gray) t = luma(t);
  const int h = static_cast<int>(t.size(1)), w = static_cast<int>(t.size(2));
  const auto [rh, rw] = io::image::resized_size(spec_, h, w);
  if (rh != h || rw != w) {
    auto x = t.to(torch::kDouble);
    if (rw != w) x = pass(x, rw);  // horizontal first, as PIL does
    if (rh != h) x = pass(x.transpose(1, 2), rh).transpose(1, 2);
    t = x.to(torch::kByte);
  }
  const auto [top, left] = io::image::crop_offsets(spec_, rh, rw);
  const int oh = spec_.crop_h ? spec_.crop_h : rh, ow = spec_.crop_w ? spec_.crop_w : rw;
  // Negative padding crops: (left, right, top, bottom) of the last two axes.
  return torch::constant_pad_nd(t, {-left, left + ow - rw, -top, top + oh - rh}, 0).contiguous();
}

}  // namespace traincache::model
