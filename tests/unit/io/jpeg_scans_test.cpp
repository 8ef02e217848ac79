// The library's progressive scan decoder (io/jpeg_scans.cpp, through decode_for()) against
// libjpeg's own: progressive files written by libjpeg's compressor with scan scripts of every kind
// of scan (DC and AC, first and refinement, interleaved and not, successive approximation down from
// bit 3), restart intervals, four samplings and sizes down to one pixel, decoded by both to the same
// samples; and a damaged file given back to libjpeg's decoder.
// Built where CMake found libjpeg (TRAINCACHE_EXPECT_JPEG_PARTS), which the test links to write
// the files.
#if TRAINCACHE_EXPECT_JPEG_PARTS
#include <cstdio>  // jpeglib.h uses FILE
// clang-format off
#include <jpeglib.h>
// clang-format on
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "catch.h"
#include "traincache/io/image.h"

using namespace traincache::io::image;

#if TRAINCACHE_EXPECT_JPEG_PARTS

namespace {

// A photo-like pattern (smooth waves and noise, so that every band has coefficients).
std::vector<unsigned char> pattern(int h, int w, int comps) {
  std::vector<unsigned char> px(static_cast<std::size_t>(h) * w * comps);
  uint32_t seed = 12345;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < comps; ++k) {
        seed = seed * 1664525u + 1013904223u;
        const double v = 128 + 70 * std::sin(0.07 * x + 0.05 * y + k) + static_cast<int>(seed >> 27) - 16;
        px[(static_cast<std::size_t>(y) * w + x) * comps + k] = static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
      }
  return px;
}

// A scan script with successive approximation everywhere: DC non-interleaved, then AC bands at bit
// 3 (luma) or 2 (chroma), refined bit by bit, the DC refined interleaved between and at the end.
std::vector<jpeg_scan_info> deep_script(int comps) {
  std::vector<jpeg_scan_info> s;
  auto add = [&](std::vector<int> ci, int ss, int se, int ah, int al) {
    jpeg_scan_info i{};
    i.comps_in_scan = static_cast<int>(ci.size());
    for (std::size_t k = 0; k < ci.size(); ++k) i.component_index[k] = ci[k];
    i.Ss = ss;
    i.Se = se;
    i.Ah = ah;
    i.Al = al;
    s.push_back(i);
  };
  for (int c = 0; c < comps; ++c) add({c}, 0, 0, 0, 2);
  add({0}, 1, 2, 0, 3);
  add({0}, 3, 9, 0, 3);
  add({0}, 10, 63, 0, 3);
  for (int c = 1; c < comps; ++c) add({c}, 1, 63, 0, 2);
  add(comps == 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{0}, 0, 0, 2, 1);
  for (int ah = 3; ah > 0; --ah) add({0}, 1, 63, ah, ah - 1);
  for (int c = 1; c < comps; ++c)
    for (int ah = 2; ah > 0; --ah) add({c}, 1, 63, ah, ah - 1);
  add(comps == 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{0}, 0, 0, 1, 0);
  return s;
}

struct Written {
  std::string bytes;
  int scans;
};

// h x w, grey (comps 1) or YCbCr with luma sampled hs x vs; script empty: libjpeg's
// jpeg_simple_progression.
Written write_progressive(int h, int w, int comps, int hs, int vs, int quality,
                          const std::vector<jpeg_scan_info>& script, unsigned restart) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  if (comps == 3) {
    c.comp_info[0].h_samp_factor = hs;
    c.comp_info[0].v_samp_factor = vs;
  }
  if (script.empty()) {
    jpeg_simple_progression(&c);
  } else {
    c.scan_info = script.data();
    c.num_scans = static_cast<int>(script.size());
  }
  c.restart_interval = restart;
  const int scans = c.num_scans;
  jpeg_start_compress(&c, TRUE);
  const std::vector<unsigned char> px = pattern(h, w, comps);
  while (c.next_scanline < c.image_height) {
    auto* row = const_cast<JSAMPROW>(px.data() + static_cast<std::size_t>(c.next_scanline) * w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Written r{std::string(reinterpret_cast<char*>(out), size), scans};
  std::free(out);
  return r;
}

extern "C" void quiet(j_common_ptr, int) {}

// The whole image as libjpeg's own decoder gives it (warnings ignored, as PIL ignores them).
std::vector<unsigned char> libjpeg_decode(const std::string& bytes, int& h, int& w, int& channels) {
  jpeg_decompress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  err.emit_message = quiet;
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&c, TRUE);
  c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&c);
  h = static_cast<int>(c.output_height);
  w = static_cast<int>(c.output_width);
  channels = c.output_components;
  std::vector<unsigned char> px(static_cast<std::size_t>(h) * w * channels);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = px.data() + static_cast<std::size_t>(c.output_scanline) * w * channels;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return px;
}

// decode_for() of the image's own size (a region decode of all of it) matches libjpeg's decode.
bool same_as_libjpeg(const std::string& bytes) {
  int h = 0, w = 0, channels = 0;
  const std::vector<unsigned char> want = libjpeg_decode(bytes, h, w, channels);
  Spec spec;
  parse_resize((std::to_string(h) + "," + std::to_string(w)).c_str(), spec);
  parse_center_crop((std::to_string(h) + "," + std::to_string(w)).c_str(), spec);
  spec.channels = channels == 1 ? Channels::gray : Channels::rgb;
  Image img;
  decode_for(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), spec, "x.jpg", img);
  const Image::Part part = img.whole() ? Image::Part{0, 0, h, w} : img.part;
  if (img.height != h || img.width != w || img.channels != channels) return false;
  for (int y = 0; y < part.rows; ++y)
    for (int x = 0; x < part.cols * channels; ++x)
      if (img.samples[(static_cast<std::size_t>(y) * part.cols) * channels + x] !=
          want[(static_cast<std::size_t>(part.top + y) * w + part.left) * channels + x])
        return false;
  return true;
}

}  // namespace

CATCH_TEST_CASE("progressive scans decode to libjpeg's samples", "[image][jpeg_scans]") {
  const ProgressiveCounts before = progressive_counts();
  long scans = 0;
  int files = 0;
  const std::vector<std::pair<int, int>> sizes{{375, 500}, {37, 61}, {8, 8}, {1, 1}, {17, 300}};
  const std::vector<std::pair<int, int>> samplings{{1, 1}, {2, 1}, {2, 2}, {0, 0}};  // 4:4:4, 4:2:2, 4:2:0, grey
  for (const auto& [h, w] : sizes)
    for (const auto& [hs, vs] : samplings)
      for (bool deep : {false, true})
        for (unsigned restart : {0u, 1u, 5u})
          for (int quality : {30, 95}) {
            const int comps = hs ? 3 : 1;
            const Written f = write_progressive(h, w, comps, hs, vs, quality,
                                                deep ? deep_script(comps) : std::vector<jpeg_scan_info>{}, restart);
            CATCH_INFO(h << "x" << w << " sampling " << hs << "x" << vs << (deep ? " deep" : " simple") << " restart "
                         << restart << " quality " << quality);
            CATCH_CHECK(same_as_libjpeg(f.bytes));
            scans += f.scans;
            ++files;
          }
  const ProgressiveCounts after = progressive_counts();
  CATCH_CHECK(files == 240);
  CATCH_CHECK(after.files_given_back == before.files_given_back);
  // Every scan of every file went through the library's decoder where the build has it.
  CATCH_CHECK(progressive_scans_built() == (TRAINCACHE_EXPECT_JPEG_SCANS != 0));
  CATCH_CHECK(after.scans - before.scans == (progressive_scans_built() ? scans : 0));
}

CATCH_TEST_CASE("a damaged progressive file is given back to libjpeg's decoder", "[image][jpeg_scans]") {
  // An end-of-image marker put in the middle of the last scan's data: libjpeg warns, decodes the
  // rest of that scan as zeros and stops; the library's decoder gives the file back to it.
  std::string bytes = write_progressive(375, 500, 3, 2, 2, 90, {}, 0).bytes;
  const std::size_t last_scan = bytes.rfind("\xFF\xDA");
  CATCH_REQUIRE(last_scan != std::string::npos);
  std::size_t at = last_scan + (bytes.size() - last_scan) / 2;
  while (static_cast<unsigned char>(bytes[at - 1]) == 0xFF || static_cast<unsigned char>(bytes[at]) == 0xFF) ++at;
  bytes[at] = '\xFF';
  bytes[at + 1] = '\xD9';
  const ProgressiveCounts before = progressive_counts();
  CATCH_CHECK(same_as_libjpeg(bytes));
  const ProgressiveCounts after = progressive_counts();
  CATCH_CHECK(after.files_given_back - before.files_given_back == (progressive_scans_built() ? 1 : 0));
}

#endif
