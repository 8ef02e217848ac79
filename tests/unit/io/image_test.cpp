#include "traincache/io/image.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "../model/jpeg_writer.h"
#include "catch.h"
#include "test_util.h"
#include "traincache/base/content_hash.h"
#include "traincache/io/npy.h"
#include "traincache/io/source.h"

using namespace traincache;
using namespace traincache::io::image;

namespace {

Spec spec_of(const char* resize, const char* crop = nullptr) {
  Spec s;
  if (resize) parse_resize(resize, s);
  if (crop) parse_center_crop(crop, s);
  return s;
}

}  // namespace

CATCH_TEST_CASE("resize and crop sizes follow torchvision", "[image]") {
  // Resize(S): the shorter side becomes S, the longer int(S * long / short), truncated.
  CATCH_CHECK(resized_size(spec_of("32"), 100, 50) == std::pair{64, 32});
  CATCH_CHECK(resized_size(spec_of("32"), 33, 50) == std::pair{32, 48});  // 48.48 -> 48
  CATCH_CHECK(resized_size(spec_of("32"), 40, 40) == std::pair{32, 32});
  CATCH_CHECK(resized_size(spec_of("20,30"), 7, 9) == std::pair{20, 30});
  CATCH_CHECK(resized_size(Spec{}, 7, 9) == std::pair{7, 9});
  CATCH_CHECK(output_shape(spec_of("32", "28"), 100, 50) == std::vector<int64_t>{3, 28, 28});
  Spec gray = spec_of("32", "10,12");
  gray.channels = Channels::gray;
  CATCH_CHECK(output_shape(gray, 5, 5) == std::vector<int64_t>{1, 10, 12});
  CATCH_CHECK(gray.fixed_size());
  CATCH_CHECK(!spec_of("32").fixed_size());
}

CATCH_TEST_CASE("PIL's antialiased bilinear resampling", "[image]") {
  // 4 -> 2 samples: output 0 is centred at 1.0 with support 2: weights 3/7, 3/7, 1/7 on 0, 100,
  // 200 = 71.43 -> 71; output 1 (centre 3.0): 1/7, 3/7, 3/7 on 100, 200, 255 = 209.29 -> 209.
  std::vector<uint8_t> row{0, 100, 200, 255};
  CATCH_CHECK(resize_bilinear(row, 1, 4, 1, 1, 2) == std::vector<uint8_t>{71, 209});
  // The same along the other axis, per channel.
  std::vector<uint8_t> col{0, 9, 100, 9, 200, 9, 255, 9};
  CATCH_CHECK(resize_bilinear(col, 4, 1, 2, 2, 1) == std::vector<uint8_t>{71, 9, 209, 9});
  // Same size: unchanged; a constant image stays constant at any size.
  CATCH_CHECK(resize_bilinear(row, 1, 4, 1, 1, 4) == row);
  std::vector<uint8_t> flat(7 * 5 * 3, 77);
  auto up = resize_bilinear(flat, 7, 5, 3, 13, 11);
  CATCH_CHECK(up.size() == 13 * 11 * 3);
  CATCH_CHECK(std::all_of(up.begin(), up.end(), [](uint8_t v) { return v == 77; }));
  // Upscaling 2 -> 4 interpolates between the two samples (support 1).
  CATCH_CHECK(resize_bilinear({0, 200}, 1, 2, 1, 1, 4) == std::vector<uint8_t>{0, 50, 150, 200});
}

CATCH_TEST_CASE("resizing only the crop gives the bits of the whole resize, then the crop", "[image][simd]") {
  // Photos of mixed sizes and shapes (both orientations, odd sizes, smaller and larger than the
  // output), grey, RGB and RGBA, under the specs people use: the reader resamples only the window
  // the crop keeps, and every sample must equal resize_bilinear's of the whole image, cropped.
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  const std::vector<std::pair<int, int>> sizes{{375, 500}, {500, 375}, {333, 501}, {720, 1280}, {49, 67},
                                               {256, 256}, {224, 300}, {1, 9},     {257, 255}};
  const std::vector<std::pair<const char*, const char*>> specs{{"256", "224"},   {"64", "56"},        {"256", nullptr},
                                                               {nullptr, "200"}, {"120,80", "64,33"}, {"300", "300"},
                                                               {"8", "8"}};
  for (const auto& [h, w] : sizes)
    for (int c : {1, 3, 4}) {
      Image img;
      img.height = h;
      img.width = w;
      img.channels = c;
      img.samples.resize(static_cast<std::size_t>(h) * w * c);
      for (auto& v : img.samples) v = static_cast<uint8_t>(next() >> 24);
      for (const auto& [resize, crop] : specs) {
        const Spec spec = spec_of(resize, crop);
        const auto shape = output_shape(spec, h, w);
        const auto [rh, rw] = resized_size(spec, h, w);
        if (shape[1] > rh || shape[2] > rw) continue;  // a padding crop: the whole-image path
        const std::vector<uint8_t> whole = resize_bilinear(img.samples.data(), h, w, c, rh, rw);
        const auto [top, left] = crop_offsets(spec, rh, rw);
        std::vector<uint8_t> want;
        for (int ch = 0; ch < c; ++ch)
          for (int y = 0; y < shape[1]; ++y)
            for (int x = 0; x < shape[2]; ++x)
              want.push_back(whole[(static_cast<std::size_t>(y + top) * rw + x + left) * c + ch]);
        std::vector<uint8_t> got(want.size());
        preprocess_pixels(img, spec, got.data());
        CATCH_INFO(h << "x" << w << "x" << c << " resize " << (resize ? resize : "-") << " crop "
                     << (crop ? crop : "-"));
        CATCH_CHECK(got == want);
      }
    }
}

CATCH_TEST_CASE("photos of many sizes in any order give each photo's own resize", "[image][simd]") {
  // A reader thread meets sizes in any order, more of them than it keeps kernels for: each photo
  // must still be resampled with its own kernels (a kernel kept for one axis was once replaced by
  // the other axis's while still in use, when the photo before had more than a few other sizes).
  uint32_t state = 777;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  std::vector<Image> photos;
  for (int i = 0; i < 14; ++i) {
    Image img;
    img.height = 40 + 7 * (i % 3);  // heights shared, widths not: one axis's kernel kept, the other's new
    img.width = 150 - 5 * i;
    img.channels = 3;
    img.samples.resize(static_cast<std::size_t>(img.height) * img.width * 3);
    for (auto& v : img.samples) v = static_cast<uint8_t>(next() >> 24);
    photos.push_back(std::move(img));
  }
  const Spec spec = spec_of("36", "32");
  for (int pick = 0; pick < 400; ++pick) {
    const Image& img = photos[(next() >> 16) % photos.size()];
    const auto [rh, rw] = resized_size(spec, img.height, img.width);
    const std::vector<uint8_t> whole = resize_bilinear(img.samples.data(), img.height, img.width, 3, rh, rw);
    const auto [top, left] = crop_offsets(spec, rh, rw);
    std::vector<uint8_t> want;
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          want.push_back(whole[(static_cast<std::size_t>(y + top) * rw + x + left) * 3 + ch]);
    std::vector<uint8_t> got(want.size());
    preprocess_pixels(img, spec, got.data());
    CATCH_INFO("pick " << pick << ": " << img.height << "x" << img.width);
    const bool same = got == want;
    CATCH_REQUIRE(same);
  }
}

CATCH_TEST_CASE("center crop offsets round half to even; larger crops pad with zeros", "[image]") {
  Image img;
  img.height = 1;
  img.width = 5;
  img.channels = 1;
  img.samples = {10, 20, 30, 40, 50};
  std::vector<float> out(4);
  Spec s = spec_of(nullptr, "1,4");  // (5 - 4) / 2 = 0.5 -> 0
  s.channels = Channels::gray;
  preprocess(img, s, out.data());
  CATCH_CHECK(out == std::vector<float>{10 / 255.f, 20 / 255.f, 30 / 255.f, 40 / 255.f});
  img.width = 7;
  img.samples = {10, 20, 30, 40, 50, 60, 70};
  preprocess(img, s, out.data());  // (7 - 4) / 2 = 1.5 -> 2
  CATCH_CHECK(out == std::vector<float>{30 / 255.f, 40 / 255.f, 50 / 255.f, 60 / 255.f});
  std::vector<float> padded(3 * 9);
  Spec pad = spec_of(nullptr, "3,9");  // 1 row above, 1 below; 1 column left, 1 right
  pad.channels = Channels::gray;
  preprocess(img, pad, padded.data());
  CATCH_CHECK(padded[0] == 0.f);
  CATCH_CHECK(padded[9] == 0.f);
  CATCH_CHECK(padded[10] == 10 / 255.f);
  CATCH_CHECK(padded[16] == 70 / 255.f);
  CATCH_CHECK(padded[17] == 0.f);
  CATCH_CHECK(padded[18] == 0.f);
}

CATCH_TEST_CASE("normalisation per channel, broadcast from one value", "[image]") {
  Image img;
  img.height = img.width = 1;
  img.channels = 3;
  img.samples = {255, 0, 51};
  Spec s;
  parse_normalize("0.5:0.25", s);
  validate(s);
  std::vector<float> out(3);
  preprocess(img, s, out.data());
  CATCH_CHECK(out == std::vector<float>{2.f, -2.f, (0.2f - 0.5f) / 0.25f});
  parse_normalize("imagenet", s);
  CATCH_CHECK(s.describe()[3].second == "0.485,0.456,0.406:0.229,0.224,0.225");
  s.channels = Channels::gray;
  CATCH_CHECK(test::code_of([&] { validate(s); }) == Exit::usage);
}

CATCH_TEST_CASE("EXIF orientations turn the image as PIL's exif_transpose", "[image]") {
  // 2 rows x 3 columns: a b c / d e f.
  Image img;
  img.height = 2;
  img.width = 3;
  img.channels = 1;
  img.samples = {'a', 'b', 'c', 'd', 'e', 'f'};
  auto text = [&](int o) {
    Image r = apply_orientation(img, o);
    return std::to_string(r.height) + "x" + std::to_string(r.width) + ":" +
           std::string(r.samples.begin(), r.samples.end());
  };
  CATCH_CHECK(text(1) == "2x3:abcdef");
  CATCH_CHECK(text(2) == "2x3:cbafed");
  CATCH_CHECK(text(3) == "2x3:fedcba");
  CATCH_CHECK(text(4) == "2x3:defabc");
  CATCH_CHECK(text(5) == "3x2:adbecf");
  CATCH_CHECK(text(6) == "3x2:daebfc");  // 90 degrees clockwise
  CATCH_CHECK(text(7) == "3x2:fcebda");
  CATCH_CHECK(text(8) == "3x2:cfbead");  // 90 degrees counter-clockwise
}

CATCH_TEST_CASE("bad image bytes and spec text are refused with the reason", "[image]") {
  const unsigned char gif[] = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  CATCH_CHECK(test::message_of([&] { decode(gif, sizeof gif, Channels::rgb, false, "x.gif"); }) ==
              "x.gif: unsupported image format (a GIF image); only JPEG and PNG are supported");
  CATCH_CHECK(test::message_of([&] { decode(gif, 0, Channels::rgb, false, "e.png"); }) ==
              "e.png: empty file, not a JPEG or PNG image");
  const unsigned char jpeg_head[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0};
  CATCH_CHECK(test::code_of([&] { decode(jpeg_head, sizeof jpeg_head, Channels::rgb, false, "t.jpg"); }) == Exit::data);
  Spec s;
  CATCH_CHECK(test::message_of([&] { parse_resize("3,4,5", s); }) ==
              "--resize: expected S or H,W (positive integers), got '3,4,5'");
  CATCH_CHECK(test::message_of([&] { parse_center_crop("x", s); }) ==
              "--center-crop: expected S or H,W (integers 1..65535), got 'x'");
  CATCH_CHECK(test::message_of([&] { parse_normalize("0.5,0.5:1", s); }) ==
              "--normalize: as many means as standard deviations are needed, got '0.5,0.5:1'");
  CATCH_CHECK(test::message_of([&] { parse_normalize("0.5:0", s); }) ==
              "--normalize: standard deviations must be positive, got '0.5:0'");
}

namespace {

// A JPEG's marker layout, without pixels: SOI, then `segments` (marker byte, payload), then `tail`
// (entropy-coded data and what follows it).
std::vector<unsigned char> markers(const std::vector<std::pair<unsigned char, std::vector<unsigned char>>>& segments,
                                   const std::vector<unsigned char>& tail) {
  std::vector<unsigned char> b{0xFF, 0xD8};
  for (const auto& [m, payload] : segments) {
    const std::size_t len = payload.size() + 2;
    b.insert(b.end(), {0xFF, m, static_cast<unsigned char>(len >> 8), static_cast<unsigned char>(len & 0xFF)});
    b.insert(b.end(), payload.begin(), payload.end());
  }
  b.insert(b.end(), tail.begin(), tail.end());
  return b;
}

bool complete(const std::vector<unsigned char>& b, std::size_t keep = SIZE_MAX) {
  return jpeg_complete(b.data(), std::min(keep, b.size()));
}

}  // namespace

CATCH_TEST_CASE("a JPEG is complete when an end-of-image marker follows its first scan", "[image]") {
  const std::vector<unsigned char> app0(14, 'j'), sos{1, 1, 0, 0x3F, 0};
  // Entropy-coded data holds 0xFF only as FF 00 (stuffing) or a restart marker FF D0..D7.
  const std::vector<unsigned char> scan{0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xFF, 0xD9};
  const auto whole = markers({{0xE0, app0}, {0xDA, sos}}, scan);
  CATCH_CHECK(complete(whole));
  for (std::size_t keep = 0; keep < whole.size(); ++keep) {  // every cut, in the header or the scan
    CATCH_INFO("kept " << keep << " of " << whole.size() << " bytes");
    CATCH_CHECK(!complete(whole, keep));
  }
  auto trailing = whole;  // bytes after EOI, as some cameras write, change nothing
  trailing.insert(trailing.end(), {0, 0, 0x17});
  CATCH_CHECK(complete(trailing));
  // An EXIF thumbnail is a JPEG inside APP1, with its own EOI: the segment's length skips it, so a
  // file cut in its own scan is still incomplete.
  const std::vector<unsigned char> thumb{'E', 'x', 'i', 'f', 0, 0, 0xFF, 0xD8, 0xFF, 0xD9};
  const auto with_thumb = markers({{0xE1, thumb}, {0xDA, sos}}, scan);
  CATCH_CHECK(complete(with_thumb));
  CATCH_CHECK(!complete(with_thumb, with_thumb.size() - 1));
  CATCH_CHECK(!complete(with_thumb, with_thumb.size() - 4));
  // Progressive: scans and tables between them; the EOI ends the last scan.
  const std::vector<unsigned char> dht(20, 3);
  auto progressive = markers({{0xDA, sos}}, {0x11, 0x22, 0xFF, 0xC4, 0, 22});
  progressive.insert(progressive.end(), dht.begin(), dht.end());
  progressive.insert(progressive.end(), {0xFF, 0xDA, 0, 7, 1, 1, 0, 0x3F, 0, 0x33, 0xFF, 0xD9});
  CATCH_CHECK(complete(progressive));
  CATCH_CHECK(!complete(progressive, progressive.size() - 2));
  auto filled = markers({}, {});  // fill bytes (FF FF) before a marker
  filled.insert(filled.end(), {0xFF, 0xFF, 0xDA, 0, 3, 0, 0x44, 0xFF, 0xD9});
  CATCH_CHECK(complete(filled));
  CATCH_CHECK(!complete(markers({{0xE0, app0}}, {0xFF, 0xD9})));  // EOI before any scan
  CATCH_CHECK(!complete({'G', 'I', 'F', '8', '9', 'a', 0xFF, 0xD9}));
}

CATCH_TEST_CASE("a JPEG's frame is its first start-of-frame marker before the first scan", "[image]") {
  const std::vector<unsigned char> sof(15, 1), dht(20, 3), sos{1, 1, 0, 0x3F, 0}, scan{0x12, 0x34, 0xFF, 0xD9};
  const auto frame = [&](std::vector<std::pair<unsigned char, std::vector<unsigned char>>> segments) {
    segments.push_back({0xDA, sos});
    const auto b = markers(segments, scan);
    return jpeg_layout(b.data(), b.size());
  };
  // Baseline, extended sequential, progressive, lossless, arithmetic progressive; the tables
  // (DHT C4, DAC CC) that share the range are not frames, nor is a frame marker after the scan.
  for (unsigned char m : {0xC0, 0xC1, 0xC2, 0xC3, 0xCA}) {
    CATCH_INFO("SOF " << int(m));
    const JpegLayout l = frame({{0xC4, dht}, {0xCC, {1, 2}}, {m, sof}});
    CATCH_CHECK(l.complete);
    CATCH_CHECK(int(l.frame) == int(m));
    CATCH_CHECK(l.baseline() == (m == 0xC0));
  }
  CATCH_CHECK(int(frame({{0xC4, dht}}).frame) == 0);  // none: complete, but no frame to name
  auto later = markers({{0xC2, sof}, {0xDA, sos}}, {0x12, 0xFF, 0xC0, 0, 3, 0, 0xFF, 0xD9});
  CATCH_CHECK(int(jpeg_layout(later.data(), later.size()).frame) == 0xC2);
  // Cut before the end: the frame is still read; incomplete.
  const auto cut = markers({{0xC0, sof}, {0xDA, sos}}, {0x12});
  const JpegLayout c = jpeg_layout(cut.data(), cut.size());
  CATCH_CHECK((!c.complete && c.baseline()));
  const JpegLayout header = jpeg_layout(cut.data(), 10);  // cut inside the frame's segment: its marker is read
  CATCH_CHECK((!header.complete && header.baseline()));
  CATCH_CHECK(int(jpeg_layout(cut.data(), 3).frame) == 0);  // cut before it
}

namespace {

// A class folder of `per_class` files in each of two classes, holding bytes that differ per file
// (never decoded: the spec fixes the size, so opening reads no header).
std::string make_folder(int per_class, int size = 10) {
  char tmpl[] = "/tmp/tc-digest-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directory(dir + "/c" + std::to_string(c));
    for (int i = 0; i < per_class; ++i) {
      std::ofstream f(dir + "/c" + std::to_string(c) + "/" + std::to_string(1000 + i) + ".jpg", std::ios::binary);
      f << std::string(static_cast<std::size_t>(size + i), static_cast<char>('a' + c)) << i;
    }
  }
  return dir;
}

// The digest as one thread feeds it, from the files themselves: the column's name and kind, then
// each file's id, size and bytes in the folder's order (a missing one: its id and "missing").
std::string reference_digest(const std::string& dir, int per_class, int64_t a, int64_t b) {
  ContentHash h;
  h.update(std::string("image") + '\0' + "images" + '\0');
  for (int64_t r = a; r < b; ++r) {
    const std::string id = "c" + std::to_string(r / per_class) + "/" + std::to_string(1000 + r % per_class) + ".jpg";
    std::ifstream f(dir + "/" + id, std::ios::binary);
    if (!f) {
      h.update(id + '\0' + "missing" + '\0');
      continue;
    }
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    h.update(id + '\0' + std::to_string(bytes.size()) + '\0');
    h.update(bytes);
  }
  return h.hex_digest();
}

// Bytes this process has had from read() so far (/proc/self/io's rchar).
int64_t bytes_read() {
  std::ifstream f("/proc/self/io");
  std::string key;
  int64_t value = -1;
  while (f >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

std::string hex(const Digest128& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += std::string{digits[b >> 4], digits[b & 15]};
  return s;
}

}  // namespace

CATCH_TEST_CASE("an image folder's digest, read on several threads, is fed as one thread would", "[image]") {
  const int per_class = 150;  // 300 files: several blocks of 64 and a partial one
  const std::string dir = make_folder(per_class);
  io::source::FileOptions files;
  files.preprocess = spec_of("8", "8");
  auto digest = [&](const io::source::Column& col, int64_t a, int64_t b) {
    ContentHash h;
    col.digest(a, b, h);
    return h.hex_digest();
  };
  auto col = io::source::open_column(dir, "image", files, io::source::Role::images);
  CATCH_CHECK(digest(*col, 0, 300) == reference_digest(dir, per_class, 0, 300));
  CATCH_CHECK(digest(*col, 5, 150) == reference_digest(dir, per_class, 5, 150));
  CATCH_CHECK(digest(*col, 7, 8) == reference_digest(dir, per_class, 7, 8));  // one row: no thread started
  CATCH_CHECK(digest(*col, 64, 128) == reference_digest(dir, per_class, 64, 128));
  CATCH_CHECK(digest(*col, 0, 300) != digest(*col, 5, 150));

  std::filesystem::remove(dir + "/c1/1100.jpg");  // row 250: gone after the folder was listed
  CATCH_CHECK(test::code_of([&] { digest(*col, 0, 300); }) == Exit::no_input);
  files.tolerate_unreadable = true;
  std::ofstream(dir + "/c1/1100.jpg") << "back";
  auto tolerant = io::source::open_column(dir, "image", files, io::source::Role::images);
  std::filesystem::remove(dir + "/c1/1100.jpg");
  CATCH_CHECK(digest(*tolerant, 0, 300) == reference_digest(dir, per_class, 0, 300));
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("an image folder's row digests come from the digest's own read of each file", "[image]") {
  const int per_class = 150;
  const std::string dir = make_folder(per_class, 4000);  // 300 files of 4 to 4.2 KB
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  io::source::FileOptions files;
  files.preprocess = spec_of("8", "8");
  auto col = io::source::open_column(dir, "image", files, io::source::Role::images);
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 300}, {5, 150}, {7, 8}}) {
    std::vector<Digest128> rows(static_cast<std::size_t>(b - a));
    ContentHash h;
    const int64_t before = bytes_read();
    col->digest_rows(a, b, h, rows.data());
    const int64_t read = bytes_read() - before;
    CATCH_CHECK(h.hex_digest() == reference_digest(dir, per_class, a, b));
    std::vector<ContentHash> each(rows.size());
    col->feed_rows(a, b, each.data());  // the row digests cache-fill keeps, each file read alone
    for (int64_t r = a; r < b; ++r) {
      CATCH_CHECK(hex(rows[r - a]) == reference_digest(dir, per_class, r, r + 1));
      CATCH_CHECK(each[r - a].hex_digest() == reference_digest(dir, per_class, r, r + 1));
    }
    if (b - a == 300) {  // every file once (a few hundred bytes of cgroup files beside)
      CATCH_CHECK(before >= 0);
      CATCH_CHECK(read >= total);
      CATCH_CHECK(read < total + total / 10);
    }
  }
  files.tolerate_unreadable = true;  // a file gone and tolerated: its row digests as missing
  auto tolerant = io::source::open_column(dir, "image", files, io::source::Role::images);
  std::filesystem::remove(dir + "/c1/1100.jpg");  // row 250
  std::vector<Digest128> rows(300);
  ContentHash h;
  tolerant->digest_rows(0, 300, h, rows.data());
  CATCH_CHECK(h.hex_digest() == reference_digest(dir, per_class, 0, 300));
  CATCH_CHECK(hex(rows[250]) == reference_digest(dir, per_class, 250, 251));
  CATCH_CHECK(hex(rows[249]) == reference_digest(dir, per_class, 249, 250));
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("an image folder's file digests leave the files' names out", "[image]") {
  const int per_class = 4;
  const std::string dir = make_folder(per_class);                          // c0/1000.jpg ... c1/1003.jpg
  std::filesystem::copy_file(dir + "/c0/1001.jpg", dir + "/c1/1004.jpg");  // the same bytes, row 8
  io::source::FileOptions files;
  files.preprocess = spec_of("8", "8");
  files.tolerate_unreadable = true;
  auto col = io::source::open_column(dir, "image", files, io::source::Role::images);
  std::filesystem::remove(dir + "/c1/1002.jpg");  // row 6: missing, tolerated
  std::vector<Digest128> rows(9), by_bytes(9), alone(9);
  ContentHash h, again;
  CATCH_REQUIRE(col->digest_rows_and_files(0, 9, h, rows.data(), by_bytes.data()));
  col->digest_rows(0, 9, again, alone.data());  // the row digests as they were
  CATCH_CHECK(h.hex_digest() == again.hex_digest());
  CATCH_CHECK(rows == alone);
  // Independently: the column's name, then the file's size and bytes.
  std::ifstream f(dir + "/c0/1001.jpg", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ContentHash ref;
  ref.update(std::string("image") + '\0' + "images" + '\0' + std::to_string(bytes.size()) + '\0');
  ref.update(bytes);
  CATCH_CHECK(hex(by_bytes[1]) == ref.hex_digest());
  CATCH_CHECK(by_bytes[8] == by_bytes[1]);  // the copy under another name
  CATCH_CHECK(rows[8] != rows[1]);
  CATCH_CHECK(by_bytes[2] != by_bytes[1]);
  CATCH_CHECK(by_bytes[6] == rows[6]);  // a missing file keeps its name
  // Columns whose rows are not named files have none (a .npy array).
  std::string npy = io::npy::make_header(DType::i32, {2});
  for (int32_t v : {7, 9}) npy.append(reinterpret_cast<const char*>(&v), 4);
  std::ofstream(dir + "/a.npy", std::ios::binary) << npy;
  std::vector<Digest128> n_rows(2), n_files(2);
  ContentHash hn;
  CATCH_CHECK_FALSE(
      io::source::open_column(dir + "/a.npy", "")->digest_rows_and_files(0, 2, hn, n_rows.data(), n_files.data()));
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("an image file rewritten after its digest was taken is refused when its row is read", "[image]") {
  const int per_class = 3;
  const std::string dir = make_folder(per_class);
  io::source::FileOptions files;
  files.preprocess = spec_of("8", "8");  // a fixed shape: the bytes need not be images for read_encoded
  auto col = io::source::open_column(dir, "image", files, io::source::Role::images);
  ContentHash h;
  col->digest(0, 6, h);
  CATCH_CHECK(col->read_encoded(1).bytes == "aaaaaaaaaaa1");  // as digested: read as it is

  std::ofstream(dir + "/c0/1001.jpg", std::ios::trunc) << "rewritten";  // row 1, same run
  CATCH_CHECK(test::code_of([&] { col->read_encoded(1); }) == Exit::data);
  CATCH_CHECK(test::message_of([&] { col->read_encoded(1); }) ==
              dir +
                  "/c0/1001.jpg: changed while this run read it (its bytes differ from those the input's digest was "
                  "taken of); run again when the files stay as they are");
  std::ofstream(dir + "/c0/1002.jpg", std::ios::trunc) << "bbbbbbbbbbbb2";  // same size, other bytes
  CATCH_CHECK(test::code_of([&] { col->read_encoded(2); }) == Exit::data);
  std::filesystem::remove(dir + "/c1/1000.jpg");  // row 3: removed after its digest
  CATCH_CHECK(test::code_of([&] { col->read_encoded(3); }) == Exit::data);
  ContentHash again;  // a second digest of the same run that sees other bytes
  CATCH_CHECK(test::code_of([&] { col->digest(1, 2, again); }) == Exit::data);

  // A column that was never digested (a trainer's reader) reads what is there.
  std::ofstream(dir + "/c1/1000.jpg") << "new";
  auto fresh = io::source::open_column(dir, "image", files, io::source::Role::images);
  CATCH_CHECK(fresh->read_encoded(1).bytes == "rewritten");

  // Missing when digested (tolerated) and back when read: changed too; still missing: missing.
  files.tolerate_unreadable = true;
  auto tolerant = io::source::open_column(dir, "image", files, io::source::Role::images);
  std::filesystem::remove(dir + "/c1/1001.jpg");
  std::filesystem::remove(dir + "/c1/1002.jpg");
  ContentHash t;
  tolerant->digest(0, 6, t);
  std::ofstream(dir + "/c1/1001.jpg") << "back";
  CATCH_CHECK(test::code_of([&] { tolerant->read_encoded(4); }) == Exit::data);
  CATCH_CHECK(test::code_of([&] { tolerant->read_encoded(5); }) == Exit::no_input);
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("a JPEG decoded for a crop gives the samples of the whole decode", "[image]") {
  // decode_for decodes only the rows and columns the crop's taps reach (with margins: libjpeg's
  // chroma upsampling differs at the edges of a cropped decode and after a skip); what the crop
  // then holds must be the whole decode's, in every subsampling, baseline and progressive.
  const std::vector<std::pair<int, int>> sizes{{375, 500}, {500, 375}, {333, 501}, {720, 1280}, {37, 61}};
  const std::vector<std::pair<const char*, const char*>> specs{
      {"256", "224"}, {"64", "56"}, {nullptr, "200"}, {"120,80", "64,33"}, {"300", "300"}};
  int parts = 0;
  for (const auto& [h, w] : sizes)
    for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411, TJSAMP_GRAY})
      for (bool progressive : {false, true}) {
        const std::string jpeg = test::make_jpeg(h, w, subsamp, progressive, 85);
        const auto* b = reinterpret_cast<const unsigned char*>(jpeg.data());
        for (const auto& [resize, crop] : specs)
          for (Channels ch : {Channels::rgb, Channels::gray}) {
            Spec spec = spec_of(resize, crop);
            spec.channels = ch;
            const auto shape = output_shape(spec, h, w);
            std::vector<uint8_t> want(static_cast<std::size_t>(shape[0] * shape[1] * shape[2])), got(want.size());
            preprocess_pixels(decode(b, jpeg.size(), ch, false, "x.jpg"), spec, want.data());
            Image img;
            decode_for(b, jpeg.size(), spec, "x.jpg", img);
            preprocess_pixels(img, spec, got.data());
            parts += !img.whole() && img.part.rows * img.part.cols < h * w;
            CATCH_INFO(h << "x" << w << " subsampling " << subsamp << (progressive ? " progressive" : "") << " resize "
                         << (resize ? resize : "-") << " crop " << (crop ? crop : "-"));
            CATCH_CHECK(got == want);
          }
      }
  // Where this build can (CMake found libjpeg-dev, which the Debian packages install), the photos'
  // crops were parts.
  CATCH_CHECK(jpeg_parts_built() == (TRAINCACHE_EXPECT_JPEG_PARTS != 0));
  if (jpeg_parts_built()) CATCH_CHECK(parts > 400);
}

namespace {

// The whole JPEG decoded at 1/reduce of its size by TurboJPEG (its own decode, not the library's),
// as RGB.
Image turbo_decode_reduced(const std::string& jpeg, int reduce) {
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(jpeg.data());
  tjDecompressHeader3(tj, b, static_cast<unsigned long>(jpeg.size()), &w, &h, &subsamp, &colorspace);
  Image img;
  img.height = (h + reduce - 1) / reduce;
  img.width = (w + reduce - 1) / reduce;
  img.channels = 3;
  img.samples.resize(static_cast<std::size_t>(img.height) * img.width * 3);
  const int rc = tjDecompress2(tj, b, static_cast<unsigned long>(jpeg.size()), img.samples.data(), img.width, 0,
                               img.height, TJPF_RGB, 0);
  tjDestroy(tj);
  if (rc != 0) img.samples.clear();
  return img;
}

// `spec`'s center crop of an image already resized to rh x rw (zeros where it pads), C, H, W order.
std::vector<uint8_t> crop_of(const std::vector<uint8_t>& px, int rh, int rw, int c, const Spec& spec) {
  const int oh = spec.crop_h ? spec.crop_h : rh, ow = spec.crop_w ? spec.crop_w : rw;
  const auto [top, left] = crop_offsets(spec, rh, rw);
  std::vector<uint8_t> out;
  for (int ch = 0; ch < c; ++ch)
    for (int y = top; y < top + oh; ++y)
      for (int x = left; x < left + ow; ++x)
        out.push_back(y < 0 || y >= rh || x < 0 || x >= rw ? 0 : px[(static_cast<std::size_t>(y) * rw + x) * c + ch]);
  return out;
}

}  // namespace

CATCH_TEST_CASE("--jpeg-draft's reductions follow PIL's draft() asked for the resized size", "[image]") {
  Spec spec = spec_of("256", "224");
  CATCH_CHECK(draft_reduction(spec, 3000, 4000) == 1);  // not asked for
  spec.jpeg_draft = true;
  CATCH_CHECK(draft_reduction(spec, 3000, 4000) == 8);  // 4000 // 341 = 11, 3000 // 256 = 11
  CATCH_CHECK(draft_reduction(spec, 720, 1280) == 2);   // 1280 // 455 = 2, 720 // 256 = 2
  CATCH_CHECK(draft_reduction(spec, 1023, 1023) == 2);  // 3.99 -> 2, never below the resized size
  CATCH_CHECK(draft_reduction(spec, 1024, 1024) == 4);
  CATCH_CHECK(draft_reduction(spec, 375, 500) == 1);
  CATCH_CHECK(draft_reduction(spec, 200, 300) == 1);  // an upscale
  Spec fixed = spec_of("100,50");
  fixed.jpeg_draft = true;
  CATCH_CHECK(draft_reduction(fixed, 800, 100) == 2);  // 100 // 50 = 2, 800 // 100 = 8: the smaller
  Spec crop_only = spec_of(nullptr, "64");
  crop_only.jpeg_draft = true;
  CATCH_CHECK(draft_reduction(crop_only, 3000, 4000) == 1);
  // Not part of the exact preprocessing's description: caches made without it keep their fingerprint.
  CATCH_CHECK(spec_of("256", "224").describe().size() == 5);
  CATCH_CHECK(spec.describe().back() == std::pair<std::string, std::string>{"jpeg_draft", "yes"});
  CATCH_CHECK(spec_from(spec.describe()).jpeg_draft);
}

CATCH_TEST_CASE("a JPEG decoded reduced (--jpeg-draft) gives the whole reduced decode, resized and cropped",
                "[image]") {
  // decode_for decodes a reduced JPEG's part the crop reads: its samples must be those of
  // TurboJPEG's whole decode at that scale, resized from there to what the file's own size gives.
  if (!jpeg_parts_built()) return;  // validate() refuses --jpeg-draft there (tested by the CLI)
  const std::vector<std::pair<int, int>> sizes{{375, 500}, {720, 1280}, {333, 501}, {1001, 667}};
  const std::vector<std::pair<const char*, const char*>> specs{{"64", "56"}, {"120,80", "64,33"}, {"100", nullptr},
                                                               {"30", "40"}, {"160", "150"},      {"256", "224"}};
  std::vector<int> seen(9, 0);
  for (const auto& [h, w] : sizes)
    for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_GRAY})
      for (bool progressive : {false, true}) {
        const std::string jpeg = test::make_jpeg(h, w, subsamp, progressive, 85);
        for (const auto& [resize, crop] : specs) {
          Spec spec = spec_of(resize, crop);
          spec.jpeg_draft = true;
          const int reduce = draft_reduction(spec, h, w);
          const Image whole = turbo_decode_reduced(jpeg, reduce);
          const auto [rh, rw] = resized_size(spec, h, w);
          const std::vector<uint8_t> want =
              crop_of(resize_bilinear(whole.samples.data(), whole.height, whole.width, 3, rh, rw), rh, rw, 3, spec);
          Image img;
          decode_for(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), spec, "x.jpg", img);
          std::vector<uint8_t> got(want.size());
          preprocess_pixels(img, spec, got.data());
          CATCH_INFO(h << "x" << w << " subsampling " << subsamp << (progressive ? " progressive" : "") << " resize "
                       << resize << " crop " << (crop ? crop : "-") << " reduced " << reduce);
          CATCH_CHECK(img.height == whole.height);
          CATCH_CHECK(img.file_size() == std::pair{h, w});
          const bool same = got == want;
          CATCH_CHECK(same);
          ++seen[static_cast<std::size_t>(reduce)];
        }
      }
  CATCH_CHECK(seen[1] > 0);
  CATCH_CHECK(seen[2] > 0);
  CATCH_CHECK(seen[4] > 0);
  CATCH_CHECK(seen[8] > 0);
}
