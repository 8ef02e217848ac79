// The library's progressive scan decoder (io/jpeg_scans.cpp, through decode_for()) against
// libjpeg's own: progressive files written by libjpeg's compressor with scan scripts of every kind
// of scan (DC and AC, first and refinement, interleaved and not, successive approximation down from
// bit 3), restart intervals, four samplings and sizes down to one pixel, decoded by both to the same
// samples; and damaged files, most given back to libjpeg's decoder, coming out as libjpeg's.
// Built where CMake found libjpeg (TRAINCACHE_EXPECT_JPEG_PARTS), which the test links to write
// the files.
#if TRAINCACHE_EXPECT_JPEG_PARTS
#include <cstdio>  // jpeglib.h uses FILE
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#endif

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "traincache/base/error.h"
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

// libjpeg's error manager for the reference decode: errors jump back, and of the warnings (PIL
// ignores them) only the input's premature end is kept, which decode_for() refuses as truncated.
struct Reference {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool ended_early;
};

extern "C" void reference_error(j_common_ptr c) { std::longjmp(reinterpret_cast<Reference*>(c->err)->jump, 1); }

extern "C" void reference_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<Reference*>(c->err)->ended_early = true;
}

// Steps of the reference decode, each returning false on libjpeg's error (no C++ objects with
// destructors live across the jumps).
bool reference_header(jpeg_decompress_struct& c, Reference& r, const std::string& bytes) {
  if (setjmp(r.jump)) return false;
  jpeg_mem_src(&c, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&c, TRUE);
  c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&c);
  return true;
}

bool reference_rows(jpeg_decompress_struct& c, Reference& r, unsigned char* px) {
  if (setjmp(r.jump)) return false;
  const std::size_t line = static_cast<std::size_t>(c.output_width) * c.output_components;
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = px + c.output_scanline * line;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  return true;
}

// The whole image as libjpeg's own decoder gives it; empty where libjpeg fails or the data ends
// early (what decode_for() refuses).
std::vector<unsigned char> libjpeg_decode(const std::string& bytes, int& h, int& w, int& channels) {
  jpeg_decompress_struct c{};
  Reference r{};
  c.err = jpeg_std_error(&r.mgr);
  r.mgr.error_exit = reference_error;
  r.mgr.emit_message = reference_message;
  jpeg_create_decompress(&c);
  std::vector<unsigned char> px;
  if (reference_header(c, r, bytes)) {
    h = static_cast<int>(c.output_height);
    w = static_cast<int>(c.output_width);
    channels = c.output_components;
    px.resize(static_cast<std::size_t>(h) * w * channels);
    if (!reference_rows(c, r, px.data()) || r.ended_early) px.clear();
  }
  jpeg_destroy_decompress(&c);
  return px;
}

// decode_for() of the image's own size (a region decode of all of it) matches libjpeg's decode:
// the same samples, or a refusal where libjpeg fails or the data ends early.
bool same_as_libjpeg(const std::string& bytes) {
  int h = 0, w = 0, channels = 0;
  const std::vector<unsigned char> want = libjpeg_decode(bytes, h, w, channels);
  // The image's own size from its header (the files made here have whole headers, damaged or not).
  const auto [fh, fw] = probe_size(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), false, "x.jpg");
  Spec spec;
  parse_resize((std::to_string(fh) + "," + std::to_string(fw)).c_str(), spec);
  parse_center_crop((std::to_string(fh) + "," + std::to_string(fw)).c_str(), spec);
  spec.channels = channels == 1 ? Channels::gray : Channels::rgb;
  Image img;
  try {
    decode_for(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), spec, "x.jpg", img);
  } catch (const traincache::Error&) {
    return want.empty();
  }
  if (want.empty()) return false;
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

CATCH_TEST_CASE("damaged progressive files decode as libjpeg decodes them", "[image][jpeg_scans]") {
  // Bytes of the scans changed at random (a bit flipped, a byte replaced, a marker put in, the file
  // cut short): the library's decoder gives most such files back to libjpeg's, and whatever it
  // keeps must come out as libjpeg's, or be refused where libjpeg fails or runs out of data.
  std::vector<std::string> files;
  for (unsigned restart : {0u, 3u})
    for (bool deep : {false, true})
      files.push_back(
          write_progressive(120, 160, 3, 2, 2, 90, deep ? deep_script(3) : std::vector<jpeg_scan_info>{}, restart)
              .bytes);
  std::mt19937 rng(7);
  const ProgressiveCounts before = progressive_counts();
  int same = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bytes = files[i % files.size()];
    const std::size_t scans = bytes.find("\xFF\xDA");
    for (int k = 0; k < 1 + i % 3; ++k) {
      const std::size_t at = scans + 16 + rng() % (bytes.size() - scans - 16);  // past the first SOS header
      switch (rng() % 4) {
        case 0:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << rng() % 8));
          break;
        case 1:
          bytes[at] = static_cast<char>(rng());
          break;
        case 2:
          bytes.replace(at, 2, std::string{'\xFF', static_cast<char>(0xD0 + rng() % 10)});
          break;
        default:
          bytes.resize(at);
      }
    }
    CATCH_INFO("damaged file " << i);
    const bool ok = same_as_libjpeg(bytes);
    CATCH_CHECK(ok);
    same += ok;
  }
  CATCH_CHECK(same == 200);
  if (progressive_scans_built()) CATCH_CHECK(progressive_counts().files_given_back - before.files_given_back > 100);
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
