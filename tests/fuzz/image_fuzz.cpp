// libFuzzer harness: image decoding (TurboJPEG, libspng, libexif orientation) and preprocessing on
// arbitrary bytes, in both channel modes, with a resize and a padded centre crop.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/io/image.h"

using namespace traincache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    auto [h, w] = io::image::probe_size(data, size, true, "input");
    if (int64_t{h} * w > (int64_t{1} << 22)) return 0;  // large but valid sizes only cost memory here
    for (auto ch : {io::image::Channels::rgb, io::image::Channels::gray}) {
      io::image::Image img = io::image::decode(data, size, ch, true, "input");
      io::image::Spec spec;
      spec.channels = ch;
      io::image::parse_resize("17", spec);
      io::image::parse_center_crop("13,19", spec);
      std::vector<int64_t> shape = io::image::output_shape(spec, img.height, img.width);
      std::vector<float> out(static_cast<std::size_t>(shape[0] * shape[1] * shape[2]));
      io::image::preprocess(img, spec, out.data());
    }
  } catch (const Error&) {
  }
  return 0;
}
