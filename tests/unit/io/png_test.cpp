// PNG photos decoded without libspng (io/png_direct.cpp) against libspng's own decode, sample for
// sample: every filter PNG defines, grey and RGB, odd sizes, IDAT split into many chunks; and the
// files that path must leave to libspng (other kinds, damaged ones).
#include <spng.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "catch.h"
#include "traincache/base/error.h"
#include "traincache/io/image.h"
#include "traincache/io/png_direct.h"

using namespace traincache;
using namespace traincache::io;

namespace {

// Samples of a photo-like image: smooth fields, an edge every 16 pixels, a little noise and bands
// of noise alone, so that an encoder choosing filters per row picks each of them somewhere and
// Paeth meets ties (which it breaks left, then up, then up-left).
std::vector<uint8_t> photo(int h, int w, int channels) {
  std::vector<uint8_t> px(static_cast<std::size_t>(h) * w * channels);
  uint32_t seed = 12345;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < channels; ++k) {
        seed = seed * 1664525u + 1013904223u;
        const int v = x % 32 >= 24
                          ? static_cast<int>(seed >> 24)  // a band of noise: Paeth's ties
                          : x * (2 + k) + y * (3 - k) + ((x / 16 + y / 16) % 2) * 70 + static_cast<int>(seed >> 29);
        px[(static_cast<std::size_t>(y) * w + x) * channels + k] = static_cast<uint8_t>(v);
      }
  return px;
}

// A PNG of `px` written by libspng with the filters `filters` (SPNG_FILTER_CHOICE_*).
std::string encode(const std::vector<uint8_t>& px, int h, int w, uint8_t color, int depth, int filters,
                   uint8_t interlace = 0) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(ctx, SPNG_FILTER_CHOICE, filters);
  spng_ihdr ihdr{
      static_cast<uint32_t>(w), static_cast<uint32_t>(h), static_cast<uint8_t>(depth), color, 0, 0, interlace};
  spng_set_ihdr(ctx, &ihdr);
  if (color == SPNG_COLOR_TYPE_INDEXED) {
    spng_plte plte{};
    plte.n_entries = 256;
    for (int i = 0; i < 256; ++i) plte.entries[i] = {static_cast<uint8_t>(i), static_cast<uint8_t>(255 - i), 7, 0};
    spng_set_plte(ctx, &plte);
  }
  const int rc = spng_encode_image(ctx, px.data(), px.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  std::size_t len = 0;
  int err = 0;
  void* buf = rc == 0 ? spng_get_png_buffer(ctx, &len, &err) : nullptr;
  std::string out = buf ? std::string(static_cast<char*>(buf), len) : std::string();
  std::free(buf);
  spng_ctx_free(ctx);
  CATCH_REQUIRE(!out.empty());
  return out;
}

struct Chunk {
  std::string type, data;
};

std::vector<Chunk> chunks(const std::string& png) {
  std::vector<Chunk> out;
  for (std::size_t pos = 8; pos + 12 <= png.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(png.data() + pos);
    const std::size_t n = std::size_t{p[0]} << 24 | p[1] << 16 | p[2] << 8 | p[3];
    out.push_back({png.substr(pos + 4, 4), png.substr(pos + 8, n)});
    pos += 12 + n;
  }
  return out;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string assemble(const std::vector<Chunk>& cs) {
  std::string out = "\x89PNG\r\n\x1a\n";
  for (const auto& c : cs) {
    const std::string td = c.type + c.data;
    out += be32(static_cast<uint32_t>(c.data.size())) + td +
           be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()), td.size())));
  }
  return out;
}

// The PNG with its image data in IDAT chunks of `n` bytes.
std::string split_idat(const std::string& png, std::size_t n) {
  std::vector<Chunk> out;
  std::string z;
  for (const auto& c : chunks(png)) {
    if (c.type == "IDAT") {
      z += c.data;
      continue;
    }
    if (c.type == "IEND")
      for (std::size_t i = 0; i < z.size(); i += n) out.push_back({"IDAT", z.substr(i, n)});
    out.push_back(c);
  }
  return assemble(out);
}

// libspng's decode of an 8-bit grey or RGB PNG, as the file has it.
std::vector<uint8_t> bytes_of(const ByteBuffer& b) { return {b.begin(), b.end()}; }

std::vector<uint8_t> spng_samples(const std::string& png, int channels) {
  spng_ctx* ctx = spng_ctx_new(0);
  spng_set_png_buffer(ctx, png.data(), png.size());
  const int fmt = channels == 3 ? SPNG_FMT_RGB8 : SPNG_FMT_G8;
  std::size_t n = 0;
  spng_decoded_image_size(ctx, fmt, &n);
  std::vector<uint8_t> out(n);
  const int rc = spng_decode_image(ctx, out.data(), n, fmt, 0);
  spng_ctx_free(ctx);
  CATCH_REQUIRE(rc == 0);
  return out;
}

const auto* bytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

}  // namespace

CATCH_TEST_CASE("a PNG photo decodes to libspng's samples, through libdeflate where the build has it",
                "[image][simd]") {
  CATCH_CHECK(png_direct::available() == static_cast<bool>(TRAINCACHE_EXPECT_PNG_DIRECT));
  const std::vector<std::pair<int, int>> sizes{{375, 500}, {37, 61}, {1, 1}, {64, 7}, {5, 300}};
  for (const auto& [h, w] : sizes)
    for (int channels : {3, 1})
      for (int filters : {SPNG_FILTER_CHOICE_NONE, SPNG_FILTER_CHOICE_SUB, SPNG_FILTER_CHOICE_UP,
                          SPNG_FILTER_CHOICE_AVG, SPNG_FILTER_CHOICE_PAETH, SPNG_FILTER_CHOICE_ALL}) {
        const uint8_t color = channels == 3 ? SPNG_COLOR_TYPE_TRUECOLOR : SPNG_COLOR_TYPE_GRAYSCALE;
        const std::string png = encode(photo(h, w, channels), h, w, color, 8, filters);
        const std::vector<uint8_t> want = spng_samples(png, channels);
        CATCH_INFO(h << "x" << w << "x" << channels << " filters " << filters);
        for (const std::string& file : {png, split_idat(png, 100), split_idat(png, 1)}) {
          ByteBuffer got;
          int gw = 0, gh = 0, gc = 0;
          CATCH_REQUIRE(png_direct::decode(bytes(file), file.size(), int64_t{1} << 40, got, gw, gh, gc) ==
                        png_direct::available());
          if (png_direct::available()) {
            CATCH_CHECK((gh == h && gw == w && gc == channels));
            CATCH_CHECK(bytes_of(got) == want);
          }
          const image::Image img = image::decode(
              bytes(file), file.size(), channels == 3 ? image::Channels::rgb : image::Channels::gray, false, "x.png");
          CATCH_CHECK(bytes_of(img.samples) == want);
        }
      }
}

CATCH_TEST_CASE("PNGs of other kinds, or damaged, are left to libspng", "[image]") {
  const auto px = photo(20, 30, 3);
  const std::string good = encode(px, 20, 30, SPNG_COLOR_TYPE_TRUECOLOR, 8, SPNG_FILTER_CHOICE_ALL);
  auto flipped = [](std::string s, std::size_t at) {  // a byte of the last IDAT's data changed
    s[at] = static_cast<char>(s[at] ^ 0x55);
    return s;
  };
  auto with = [&](auto change) {
    auto cs = chunks(good);
    change(cs);
    return assemble(cs);
  };
  std::vector<std::pair<const char*, std::string>> files{
      {"16-bit", encode(photo(20, 60, 3), 20, 30, SPNG_COLOR_TYPE_TRUECOLOR, 16, SPNG_FILTER_CHOICE_ALL)},
      {"palette", encode(photo(20, 30, 1), 20, 30, SPNG_COLOR_TYPE_INDEXED, 8, SPNG_FILTER_CHOICE_ALL)},
      {"RGBA", encode(photo(20, 30, 4), 20, 30, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8, SPNG_FILTER_CHOICE_ALL)},
      {"tRNS", with([](auto& cs) {
         cs.insert(cs.begin() + 1, {"tRNS", std::string(6, '\0')});
       })},
      {"a chunk's CRC wrong", flipped(good, good.size() - 20)},
      {"no IEND", good.substr(0, good.size() - 12)},
      {"bytes after IEND", good + "junk"},
      {"an unknown critical chunk", with([](auto& cs) {
         cs.insert(cs.begin() + 1, {"ABCD", "x"});
       })},
      {"a row filter of 5", with([&](auto& cs) {
         std::vector<uint8_t> raw(20 * 91, 5);
         uLongf n = compressBound(raw.size());
         std::string z(n, '\0');
         compress(reinterpret_cast<Bytef*>(z.data()), &n, raw.data(), raw.size());
         for (auto& c : cs)
           if (c.type == "IDAT") c.data = z.substr(0, n);
       })},
  };
  for (const auto& [what, file] : files) {
    CATCH_INFO(what);
    ByteBuffer got;
    int w = 0, h = 0, c = 0;
    CATCH_CHECK(!png_direct::decode(bytes(file), file.size(), int64_t{1} << 40, got, w, h, c));
    CATCH_CHECK((w == 0 && h == 0 && c == 0));
  }
  // What libspng makes of them is what decode() gives: the palette's colours, a refusal naming the
  // damage, the image of a file whose image data is whole.
  const image::Image pal =
      image::decode(bytes(files[1].second), files[1].second.size(), image::Channels::rgb, false, "p.png");
  const uint8_t index = photo(20, 30, 1)[0];
  CATCH_CHECK((pal.channels == 3 && pal.samples[0] == index && pal.samples[1] == 255 - index && pal.samples[2] == 7));
  CATCH_CHECK_THROWS_WITH(
      image::decode(bytes(files[8].second), files[8].second.size(), image::Channels::rgb, false, "f.png"),
      Catch::Matchers::StartsWith("f.png: corrupt PNG ("));
  CATCH_CHECK(
      bytes_of(image::decode(bytes(files[5].second), files[5].second.size(), image::Channels::rgb, false, "t.png")
                   .samples) == px);  // libspng needs no IEND once the image data is whole
  // Larger than the caller's limit: false, for the caller's own check to name it.
  ByteBuffer got;
  int w = 0, h = 0, c = 0;
  CATCH_CHECK(png_direct::decode(bytes(good), good.size(), 599, got, w, h, c) == false);
}
