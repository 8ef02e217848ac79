// nvJPEG's decoder (model/jpeg_gpu.h) against the CPU's (io::image::decode, libjpeg-turbo as PIL
// uses it), on JPEGs that TurboJPEG writes here: 4:2:0, 4:4:4, grey, progressive. Without a CUDA
// device or without nvJPEG in the build, the decoder must refuse to start (69) with a reason.
#include "traincache/model/jpeg_gpu.h"

#include <torch/torch.h>

#include <cmath>

#include "../catch.h"
#include "../test_util.h"
#include "jpeg_writer.h"
#include "traincache/base/error.h"
#include "traincache/io/image.h"
#include "traincache/model/runtime.h"

using namespace traincache;

namespace {

bool gpu_decoding() { return model::nvjpeg_built() && torch::cuda::is_available(); }

}  // namespace

CATCH_TEST_CASE("jpeg_gpu: without nvJPEG or a CUDA device the decoder refuses to start", "[jpeg_gpu]") {
  if (gpu_decoding()) {
    CATCH_CHECK(test::code_of([] { model::make_jpeg_decoder(torch::Device("cpu")); }) == Exit::unavailable);
    return;
  }
  CATCH_CHECK(test::code_of([] { model::make_jpeg_decoder(torch::Device("cuda:0")); }) == Exit::unavailable);
  try {
    model::make_jpeg_decoder(torch::Device("cuda:0"));
  } catch (const Error& e) {
    const std::string why = e.what();
    CATCH_CHECK_THAT(why, test::contains_text(model::nvjpeg_built() ? "cannot start" : "this build has none"));
  }
}

// --decode device leaves files without an end-of-image marker to the host's decoder. Every cut in
// the scans is incomplete; libjpeg-turbo refuses a baseline file cut anywhere as truncated, while a
// progressive one cut after its first scans can decode, with the detail those scans hold (the
// host path raises no error for it): whichever it does, the device path now does the same, since
// the file reaches the same decoder.
CATCH_TEST_CASE("jpeg_gpu: a JPEG cut anywhere in its scans is incomplete; a baseline one truncated to libjpeg-turbo",
                "[jpeg_gpu]") {
  for (const bool progressive : {false, true}) {
    const std::string f = test::make_jpeg(40, 56, TJSAMP_420, progressive);
    const auto* b = reinterpret_cast<const unsigned char*>(f.data());
    CATCH_REQUIRE(io::image::jpeg_complete(b, f.size()));
    CATCH_CHECK(io::image::decode(b, f.size(), io::image::Channels::rgb, false, "whole").width == 56);
    const std::size_t sos = f.find("\xFF\xDA");
    CATCH_REQUIRE(sos != std::string::npos);
    int cuts = 0, refused = 0;
    for (std::size_t keep = sos + 16; keep < f.size(); keep += 7, ++cuts) {
      CATCH_INFO((progressive ? "progressive" : "baseline") << ", kept " << keep << " of " << f.size());
      CATCH_CHECK(!io::image::jpeg_complete(b, keep));
      const std::string why =
          test::message_of([&] { io::image::decode(b, keep, io::image::Channels::rgb, false, "cut"); });
      if (!why.empty()) {
        CATCH_CHECK(why == "cut: truncated JPEG (Premature end of JPEG file)");
        ++refused;
      }
    }
    CATCH_CHECK(cuts > 20);
    if (!progressive) CATCH_CHECK(refused == cuts);
    if (progressive) CATCH_CHECK((refused > 0 && refused < cuts));
  }
}

// Run only by ctest's unit.encoder_test_gpu, which reports itself skipped (77) where this build has
// no nvJPEG or the machine no CUDA device; run elsewhere, it fails rather than passing unchecked.
CATCH_TEST_CASE("jpeg_gpu: nvJPEG's pixels agree with the CPU's; what it cannot decode is left to the CPU",
                "[jpeg_gpu][gpu]") {
  CATCH_REQUIRE(gpu_decoding());
  struct Case {
    int subsamp;
    bool progressive;
  };
  const Case cases[] = {
      {TJSAMP_420, false}, {TJSAMP_444, false}, {TJSAMP_422, false}, {TJSAMP_GRAY, false}, {TJSAMP_420, true}};
  std::vector<std::string> files;
  for (const Case& c : cases) files.push_back(test::make_jpeg(67, 93, c.subsamp, c.progressive));
  files.push_back("not a JPEG");
  auto decoder_ptr = model::make_jpeg_decoder(torch::Device("cuda:0"));
  auto& decoder = *decoder_ptr;
  std::vector<std::string_view> views(files.begin(), files.end());
  auto got = decoder.decode(views);
  CATCH_REQUIRE(got.size() == files.size());
  CATCH_CHECK(!got.back().defined());
  for (std::size_t i = 0; i + 1 < files.size(); ++i) {
    const auto& f = files[i];
    auto ref = io::image::decode(reinterpret_cast<const unsigned char*>(f.data()), f.size(), io::image::Channels::rgb,
                                 false, "case " + std::to_string(i));
    CATCH_REQUIRE(got[i].defined());
    auto cpu = torch::from_blob(ref.samples.data(), {ref.height, ref.width, 3}, torch::kByte).permute({2, 0, 1});
    auto diff = (got[i].cpu().to(torch::kInt) - cpu.to(torch::kInt)).abs();
    const int max = diff.max().item<int>();
    const double mean = diff.to(torch::kDouble).mean().item<double>();
    CATCH_INFO("case " << i << ": max " << max << ", mean " << mean << " (" << decoder.backends() << ")");
    std::printf("jpeg_gpu: case %zu: max |diff| %d, mean %.4f (%s)\n", i, max, mean, decoder.backends().c_str());
    CATCH_CHECK(mean < 1.0);  // IDCTs differ in rounding; upsampling as the CPU's
    CATCH_CHECK(max <= 16);
  }
}
