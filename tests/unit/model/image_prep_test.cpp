// model::ImagePrep (resize, center crop, channels and EXIF orientation on tensors, for images
// decoded on the GPU) against io::image::preprocess_pixels, the CPU path that is PIL's to the bit:
// the same bytes, on the CPU here (the same code runs on a CUDA device).
#include "traincache/model/image_prep.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "../catch.h"
#include "jpeg_writer.h"

using namespace traincache;

namespace {

io::image::Image decoded(const std::string& jpeg, io::image::Channels c) {
  return io::image::decode(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), c, false, "test.jpg");
}

// What preprocess_pixels makes of `img` under `spec`, as uint8 [C, H, W].
torch::Tensor reference(const io::image::Image& img, const io::image::Spec& spec) {
  const auto shape = io::image::output_shape(spec, img.height, img.width);
  auto out = torch::empty(shape, torch::kByte);
  io::image::preprocess_pixels(img, spec, out.data_ptr<uint8_t>());
  return out;
}

io::image::Spec spec_of(const std::string& resize, const std::string& crop, io::image::Channels c, bool exif) {
  io::image::Spec s;
  if (!resize.empty()) io::image::parse_resize(resize, s);
  if (!crop.empty()) io::image::parse_center_crop(crop, s);
  s.channels = c;
  s.exif_transpose = exif;
  return s;
}

}  // namespace

CATCH_TEST_CASE("image_prep: the CPU path's bytes for every resize, crop and EXIF orientation", "[image_prep]") {
  using io::image::Channels;
  const std::vector<io::image::Spec> specs = {
      spec_of("", "", Channels::rgb, false),       spec_of("24", "20", Channels::rgb, true),
      spec_of("16,30", "", Channels::rgb, true),   spec_of("", "80,40", Channels::rgb, false),
      spec_of("150", "224", Channels::rgb, false), spec_of("7", "9,5", Channels::rgb, true),
      spec_of("256", "224", Channels::rgb, false)};
  for (auto [h, w] : {std::pair{37, 53}, {64, 64}, {300, 200}, {10, 7}}) {
    const std::string jpeg = test::make_jpeg(h, w, TJSAMP_420);
    const auto img = decoded(jpeg, Channels::rgb);
    const auto t = torch::from_blob(const_cast<uint8_t*>(img.samples.data()), {h, w, 3}, torch::kByte)
                       .permute({2, 0, 1})
                       .contiguous();
    for (const auto& spec : specs) {
      model::ImagePrep prep(spec, torch::Device("cpu"));
      for (int o = 1; o <= (spec.exif_transpose ? 8 : 1); ++o) {
        CATCH_INFO(h << "x" << w << ", resize " << spec.resize_short << "/" << spec.resize_h << "," << spec.resize_w
                     << ", crop " << spec.crop_h << "," << spec.crop_w << ", orientation " << o);
        const auto want = reference(io::image::apply_orientation(img, o), spec);
        const auto got = prep(t, o);
        CATCH_REQUIRE(got.sizes() == want.sizes());
        CATCH_CHECK(torch::equal(got, want));
      }
    }
  }
}

CATCH_TEST_CASE("image_prep: grey as PIL's convert(\"L\") of the decoded colour", "[image_prep]") {
  using io::image::Channels;
  const std::string jpeg = test::make_jpeg(45, 61, TJSAMP_444);
  const auto rgb = decoded(jpeg, Channels::rgb);
  const auto t = torch::from_blob(const_cast<uint8_t*>(rgb.samples.data()), {45, 61, 3}, torch::kByte)
                     .permute({2, 0, 1})
                     .contiguous();
  for (const auto& spec : {spec_of("", "", Channels::gray, false), spec_of("20", "18", Channels::gray, false)}) {
    const auto want = reference(decoded(jpeg, Channels::gray), spec);
    const auto got = model::ImagePrep(spec, torch::Device("cpu"))(t, 1);
    CATCH_REQUIRE(got.sizes() == want.sizes());
    CATCH_CHECK(torch::equal(got, want));
    CATCH_CHECK(got.size(0) == 1);
  }
}
