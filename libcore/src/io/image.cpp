// Image decoding (TurboJPEG, libspng, libexif) and the preprocessing spec. Resampling follows
// PIL's definition of antialiased bilinear resizing; see docs/design.md for why it is ours.
#include "traincache/io/image.h"

#include <libexif/exif-data.h>
#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>

#include "jpeg_part.h"
#include "resample.h"
#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/io/png_direct.h"

namespace traincache::io::image {

namespace {

// PIL refuses images over twice its decompression-bomb limit; so do we.
constexpr int64_t kMaxPixels = 2 * int64_t{89478485};

void check_pixels(int64_t w, int64_t h, const std::string& what) {
  if (w <= 0 || h <= 0) throw Error(Exit::data, what, "no image size in the header (truncated or corrupt file)");
  if (w * h > kMaxPixels)
    throw Error(Exit::data, what,
                "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels is too large (over " +
                    std::to_string(kMaxPixels) + " pixels)");
}

// One TurboJPEG decompressor per thread: creating one per image costs more than a small decode.
// After a failure it is replaced, since a handle that failed may keep state from that file.
struct JpegHandle {
  tjhandle h = tjInitDecompress();
  ~JpegHandle() {
    if (h) tjDestroy(h);
  }
  void reset() {
    if (h) tjDestroy(h);
    h = tjInitDecompress();
  }
};

JpegHandle& jpeg_handle_state() {
  thread_local JpegHandle handle;
  if (!handle.h) handle.reset();
  if (!handle.h) throw Error(Exit::internal, "TurboJPEG", "cannot create a decompressor");
  return handle;
}

tjhandle jpeg_handle() { return jpeg_handle_state().h; }

// An Error(data) for `what` with TurboJPEG's message, after which the thread's handle is replaced.
Error jpeg_error(tjhandle tj, const std::string& what, const std::string& prefix) {
  Error e(Exit::data, what, prefix + tjGetErrorStr2(tj));
  jpeg_handle_state().reset();
  return e;
}

// A JPEG as 1 (grey) or 3 (RGB) channels. libjpeg-turbo's defaults are PIL's: accurate integer
// IDCT and fancy upsampling. Warnings are accepted (PIL ignores them) except a premature end.
void decode_jpeg(const unsigned char* bytes, std::size_t size, const std::string& what, Image& img) {
  tjhandle tj = jpeg_handle();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, bytes, static_cast<unsigned long>(size), &w, &h, &subsamp, &colorspace) != 0)
    throw jpeg_error(tj, what, "corrupt JPEG: ");
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw Error(Exit::data, what, "CMYK JPEG images are not supported; convert them to RGB");
  check_pixels(w, h, what);
  img.width = w;
  img.height = h;
  img.channels = colorspace == TJCS_GRAY ? 1 : 3;
  resize_for_overwrite(img.samples, static_cast<std::size_t>(w) * h * img.channels);
  if (tjDecompress2(tj, bytes, static_cast<unsigned long>(size), img.samples.data(), w, 0, h,
                    img.channels == 1 ? TJPF_GRAY : TJPF_RGB, 0) != 0) {
    const std::string msg = tjGetErrorStr2(tj);
    const bool truncated = msg.find("Premature end") != std::string::npos;
    const bool fatal = tjGetErrorCode(tj) != TJERR_WARNING || truncated;
    jpeg_handle_state().reset();
    if (fatal) throw Error(Exit::data, what, truncated ? "truncated JPEG (" + msg + ")" : "corrupt JPEG: " + msg);
  }
}

struct SpngCtx {
  spng_ctx* ctx = spng_ctx_new(0);
  ~SpngCtx() {
    if (ctx) spng_ctx_free(ctx);
  }
};

// The format libspng gives a PNG in: 8-bit RGB and grey as they are (most photos), everything else
// as RGBA8 (16-bit samples keep their high byte, as PIL opens 16-bit RGB(A) PNGs; palettes and low
// bit depths expanded). Transparency and gamma are not applied, as PIL's convert("RGB") does not
// apply them. Sets the channels that format has.
spng_format png_format(const spng_ihdr& ihdr, int& channels) {
  if (ihdr.bit_depth == 8 && ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR) return channels = 3, SPNG_FMT_RGB8;
  if (ihdr.bit_depth == 8 && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE) return channels = 1, SPNG_FMT_G8;
  return channels = 4, SPNG_FMT_RGBA8;
}

void decode_png(const unsigned char* bytes, std::size_t size, const std::string& what, Image& img) {
  if (png_direct::decode(bytes, size, kMaxPixels, img.samples, img.width, img.height, img.channels)) return;
  SpngCtx c;
  if (!c.ctx) throw Error(Exit::internal, "libspng", "cannot create a decoder");
  auto fail = [&](int rc) {
    return Error(Exit::data, what,
                 std::string(rc == SPNG_EOF || rc == SPNG_IO_EOF ? "truncated PNG (" : "corrupt PNG (") +
                     spng_strerror(rc) + ")");
  };
  spng_set_chunk_limits(c.ctx, 64u << 20, 64u << 20);
  if (int rc = spng_set_png_buffer(c.ctx, bytes, size)) throw fail(rc);
  spng_ihdr ihdr{};
  if (int rc = spng_get_ihdr(c.ctx, &ihdr)) throw fail(rc);
  check_pixels(ihdr.width, ihdr.height, what);
  const spng_format fmt = png_format(ihdr, img.channels);
  std::size_t out_size = 0;
  if (int rc = spng_decoded_image_size(c.ctx, fmt, &out_size)) throw fail(rc);
  resize_for_overwrite(img.samples, out_size);
  if (int rc = spng_decode_image(c.ctx, img.samples.data(), out_size, fmt, 0)) throw fail(rc);
  img.width = static_cast<int>(ihdr.width);
  img.height = static_cast<int>(ihdr.height);
}

// PIL's luma weights (ITU-R 601-2) in 16-bit fixed point, as its convert("L") rounds them.
inline uint8_t luma(uint32_t r, uint32_t g, uint32_t b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// 1 (grey), 3 (RGB) or 4 (RGBA) channels converted to `to`.
Image convert(Image in, Channels to) {
  const int want = to == Channels::gray ? 1 : 3;
  if (in.channels == want) return in;
  if (in.channels > want) {  // RGB(A) to fewer channels, in place: each pixel written at or before its read
    const std::size_t n = in.samples.size() / static_cast<std::size_t>(in.channels);
    uint8_t* px = in.samples.data();
    for (std::size_t i = 0; i < n; ++i) {
      const uint8_t* s = px + i * in.channels;
      uint8_t* d = px + i * want;
      if (want == 3)
        d[0] = s[0], d[1] = s[1], d[2] = s[2];
      else
        d[0] = luma(s[0], s[1], s[2]);
    }
    in.samples.resize(n * want);
    in.channels = want;
    return in;
  }
  Image out;
  out.width = in.width;
  out.height = in.height;
  out.channels = want;
  out.part = in.part;
  out.file_height = in.file_height;
  out.file_width = in.file_width;
  const std::size_t n = in.samples.size() / static_cast<std::size_t>(in.channels);
  out.samples.resize(n * want);
  const uint8_t* s = in.samples.data();
  uint8_t* d = out.samples.data();
  for (std::size_t i = 0; i < n; ++i, s += in.channels, d += want) d[0] = d[1] = d[2] = s[0];  // grey to RGB
  return out;
}

std::string format_hint(const unsigned char* b, std::size_t n) {
  auto starts = [&](const char* magic, std::size_t len) { return n >= len && std::memcmp(b, magic, len) == 0; };
  if (starts("GIF8", 4)) return "a GIF image";
  if (starts("BM", 2)) return "a BMP image";
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return "a TIFF image";
  if (starts("RIFF", 4) && n >= 12 && std::memcmp(b + 8, "WEBP", 4) == 0) return "a WebP image";
  return "not an image";
}

std::string join_numbers(const std::vector<double>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v[i]);
    out += (i ? "," : "") + std::string(buf);
  }
  return out;
}

// "S" -> {S, S}, "H,W" -> {H, W}; each 1..65535.
std::pair<int, int> parse_size(const std::string& text, const std::string& flag, bool* single) {
  auto parts = split(text, ',');
  if (parts.empty() || parts.size() > 2)
    throw Error(Exit::usage, flag, "expected S or H,W (positive integers), got '" + text + "'");
  int v[2];
  for (std::size_t i = 0; i < parts.size(); ++i) {
    char* end = nullptr;
    long x = std::strtol(parts[i].c_str(), &end, 10);
    if (parts[i].empty() || *end || x < 1 || x > 65535)
      throw Error(Exit::usage, flag, "expected S or H,W (integers 1..65535), got '" + text + "'");
    v[i] = static_cast<int>(x);
  }
  if (single) *single = parts.size() == 1;
  return {v[0], parts.size() == 1 ? v[0] : v[1]};
}

std::vector<double> parse_numbers(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (const auto& p : split(text, ',')) {
    char* end = nullptr;
    double x = std::strtod(p.c_str(), &end);
    if (p.empty() || *end || !std::isfinite(x))
      throw Error(Exit::usage, flag, "expected imagenet or MEAN,..:STD,.. (numbers), got '" + text + "'");
    out.push_back(x);
  }
  return out;
}

// Python's round() of x/2 for a non-negative integer x: halves go to the even neighbour.
int half_rounded_even(int x) {
  int q = x / 2;
  return (x % 2 == 1 && q % 2 == 1) ? q + 1 : q;
}

// What one reader thread reuses from image to image: no allocation per image once warm.
struct WindowBuffers {
  ByteBuffer rows, window;
  HorizontalTaps taps;
};

// Torchvision's Resize then CenterCrop of an h x w image as `spec` asks, where the crop lies inside
// the resized image: the resized size and the crop's window in it.
struct Window {
  int rh = 0, rw = 0, top = 0, left = 0, oh = 0, ow = 0;
};

bool crop_window(const Spec& spec, int h, int w, Window& win) {
  std::tie(win.rh, win.rw) = resized_size(spec, h, w);
  win.oh = spec.crop_h ? spec.crop_h : win.rh;
  win.ow = spec.crop_w ? spec.crop_w : win.rw;
  std::tie(win.top, win.left) = crop_offsets(spec, win.rh, win.rw);
  return win.oh <= win.rh && win.ow <= win.rw;
}

// The input rows [first, end) the output rows [top, top + n) of kernel k reach (all of [top, top + n)
// when there is no kernel: that axis is not resized).
std::pair<int, int> reached(const Kernel* k, int top, int n) {
  if (!k) return {top, top + n};
  int end = k->first[top];
  for (int o = top; o < top + n; ++o) end = std::max(end, k->first[o] + k->count[o]);
  return {k->first[top], end};
}

// `img` (whole, or the part that holds what the window reads) resized to win.rh x win.rw (PIL's
// antialiased bilinear, horizontal pass first, 8-bit between the passes) and cropped to the window:
// only the window's samples are computed, from only the input rows and columns its taps reach, to
// the same bits as resize_bilinear followed by the crop. Returns the window, oh x ow x c.
const ByteBuffer& resize_window(const Image& img, const Window& win, WindowBuffers& buf) {
  const int h = img.height, w = img.width, c = img.channels;
  const Image::Part part = img.whole() ? Image::Part{0, 0, h, w} : img.part;
  const auto ky = axis_kernel(h, win.rh);
  const auto kx = axis_kernel(w, win.rw);
  const auto [row0, row1] = reached(ky.get(), win.top, win.oh);
  const int len = win.ow * c;
  resize_for_overwrite(buf.rows, static_cast<std::size_t>(row1 - row0) * len);
  const uint8_t* first_row = img.samples.data() + static_cast<std::ptrdiff_t>(row0 - part.top) * part.cols * c;
  if (kx) {
    horizontal_window(first_row, row1 - row0, part.cols, part.left, c, *kx, win.left, win.ow, buf.rows.data(),
                      row1 == part.top + part.rows, buf.taps);
  } else {
    for (int r = 0; r < row1 - row0; ++r)
      std::memcpy(buf.rows.data() + static_cast<std::ptrdiff_t>(r) * len,
                  first_row + (static_cast<std::ptrdiff_t>(r) * part.cols + win.left - part.left) * c,
                  static_cast<std::size_t>(len));
  }
  if (!ky) return buf.rows;
  resize_for_overwrite(buf.window, static_cast<std::size_t>(win.oh) * len);
  vertical_window(buf.rows.data(), row0, len, *ky, win.top, win.oh, buf.window.data());
  return buf.window;
}

}  // namespace

const Choices<Channels>& channels_choices() {
  static const Choices<Channels> c{{Channels::rgb, "rgb"}, {Channels::gray, "gray"}};
  return c;
}

namespace {

// decode() into `img`, its buffer reused.
void decode_into(const unsigned char* bytes, std::size_t size, Channels channels, bool exif_transpose,
                 const std::string& what, Image& img) {
  img.part = {};
  img.file_height = img.file_width = 0;
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF)
    decode_jpeg(bytes, size, what, img);
  else if (size >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0)
    decode_png(bytes, size, what, img);
  else if (size == 0)
    throw Error(Exit::data, what, "empty file, not a JPEG or PNG image");
  else
    throw Error(Exit::data, what,
                "unsupported image format (" + format_hint(bytes, size) + "); only JPEG and PNG are supported");
  if (exif_transpose) {
    int o = exif_orientation(bytes, size);
    if (o != 1) img = apply_orientation(img, o);
  }
  img = convert(std::move(img), channels);
}

}  // namespace

Image decode(const unsigned char* bytes, std::size_t size, Channels channels, bool exif_transpose,
             const std::string& what) {
  Image img;
  decode_into(bytes, size, channels, exif_transpose, what, img);
  return img;
}

namespace {

// The region decode_for() decodes of an h x w JPEG, at the reduction it decodes it at: the rows and
// columns the resize and crop's taps reach, or the whole image when the crop is not inside it.
// False when that is the whole image at full size (a plain decode).
bool jpeg_region(const Spec& spec, int h, int w, Region& r) {
  r.reduce = draft_reduction(spec, h, w);
  const auto [dh, dw] = reduced_size(h, w, r.reduce);
  if (Window win; crop_window(spec, h, w, win)) {
    const auto [row0, row1] = reached(axis_kernel(dh, win.rh).get(), win.top, win.oh);
    const auto [col0, col1] = reached(axis_kernel(dw, win.rw).get(), win.left, win.ow);
    r.top = row0;
    r.left = col0;
    r.rows = row1 - row0;
    r.cols = col1 - col0;
    return true;
  }
  r.top = r.left = 0;
  r.rows = dh;
  r.cols = dw;
  return r.reduce > 1;
}

}  // namespace

int draft_reduction(const Spec& spec, int h, int w) {
  if (!spec.jpeg_draft) return 1;
  const auto [rh, rw] = resized_size(spec, h, w);
  const int room = std::min(w / std::max(rw, 1), h / std::max(rh, 1));
  for (int reduce : {8, 4, 2})
    if (room >= reduce) return reduce;
  return 1;
}

void decode_for(const unsigned char* bytes, std::size_t size, const Spec& spec, const std::string& what, Image& img) {
  const bool jpeg = size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
  if (jpeg && jpeg_parts_built() && !(spec.exif_transpose && exif_orientation(bytes, size) != 1)) {
    const auto [h, w] = probe_size(bytes, size, false, what);
    if (Region r; jpeg_region(spec, h, w, r)) {
      decode_jpeg_part(bytes, size, r, what, img);
      img = convert(std::move(img), spec.channels);
      return;
    }
  }
  decode_into(bytes, size, spec.channels, spec.exif_transpose, what, img);
}

std::pair<int, int> probe_size(const unsigned char* bytes, std::size_t size, bool exif_transpose,
                               const std::string& what) {
  int h = 0, w = 0;
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    tjhandle tj = jpeg_handle();
    int subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, bytes, static_cast<unsigned long>(size), &w, &h, &subsamp, &colorspace) != 0)
      throw jpeg_error(tj, what, "corrupt JPEG: ");
  } else if (size >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0) {
    SpngCtx c;
    spng_ihdr ihdr{};
    if (!c.ctx) throw Error(Exit::internal, "libspng", "cannot create a decoder");
    int rc = spng_set_png_buffer(c.ctx, bytes, size);
    if (rc == 0) rc = spng_get_ihdr(c.ctx, &ihdr);
    if (rc != 0) throw Error(Exit::data, what, std::string("corrupt PNG (") + spng_strerror(rc) + ")");
    h = static_cast<int>(ihdr.height);
    w = static_cast<int>(ihdr.width);
  } else {
    decode(bytes, size, Channels::rgb, false, what);  // throws the format error
  }
  check_pixels(w, h, what);
  if (exif_transpose && exif_orientation(bytes, size) >= 5) std::swap(h, w);
  return {h, w};
}

namespace {

// Whether marker m starts a frame (SOF0-SOF15 but DHT C4, JPG C8 and DAC CC).
bool starts_frame(unsigned char m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// Whether an end-of-image marker comes at or after p, in entropy-coded data (where 0xFF is followed
// by 0x00 or a marker, so an FF D9 is EOI): most files end with it, and only the others are searched.
bool ends_from(const unsigned char* b, std::size_t n, std::size_t p) {
  if (p + 2 <= n && b[n - 2] == 0xFF && b[n - 1] == 0xD9) return true;
  for (; p + 1 < n; ++p) {
    const void* ff = std::memchr(b + p, 0xFF, n - 1 - p);
    if (!ff) return false;
    p = static_cast<std::size_t>(static_cast<const unsigned char*>(ff) - b);
    if (b[p + 1] == 0xD9) return true;
  }
  return false;
}

}  // namespace

JpegLayout jpeg_layout(const unsigned char* b, std::size_t n) {
  JpegLayout layout;
  if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return layout;
  std::size_t p = 2;  // after SOI: marker segments up to the first scan's (SOS, 0xDA)
  while (true) {
    if (p >= n || b[p] != 0xFF) return layout;  // a marker must begin here
    while (p < n && b[p] == 0xFF) ++p;          // after any fill bytes
    if (p >= n) return layout;
    const unsigned char m = b[p++];
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // TEM, RSTn: no length
    if (m == 0xD9 || p + 2 > n) return layout;            // EOI before any scan; a cut length
    const std::size_t len = (std::size_t{b[p]} << 8) | b[p + 1];
    if (len < 2) return layout;
    if (starts_frame(m) && !layout.frame) layout.frame = m;
    p += len;
    if (m == 0xDA) break;
  }
  layout.complete = ends_from(b, n, p);
  return layout;
}

bool jpeg_complete(const unsigned char* b, std::size_t n) { return jpeg_layout(b, n).complete; }

int exif_orientation(const unsigned char* bytes, std::size_t size) {
  std::vector<unsigned char> tiff;  // a PNG's eXIf chunk, behind the "Exif\0\0" header libexif expects
  const unsigned char* data = bytes;
  std::size_t n = size;
  if (size >= 8 && std::memcmp(bytes, "\x89PNG", 4) == 0) {
    SpngCtx c;
    spng_exif exif{};
    if (!c.ctx || spng_set_png_buffer(c.ctx, bytes, size) != 0 || spng_get_exif(c.ctx, &exif) != 0) return 1;
    tiff.assign({'E', 'x', 'i', 'f', 0, 0});
    tiff.insert(tiff.end(), exif.data, exif.data + exif.length);
    data = tiff.data();
    n = tiff.size();
  }
  if (n > UINT32_MAX) return 1;
  std::unique_ptr<ExifData, void (*)(ExifData*)> ed(exif_data_new_from_data(data, static_cast<unsigned>(n)),
                                                    exif_data_unref);
  if (!ed) return 1;
  ExifEntry* e = exif_content_get_entry(ed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (!e || e->format != EXIF_FORMAT_SHORT || e->components < 1 || !e->data) return 1;
  int o = exif_get_short(e->data, exif_data_get_byte_order(ed.get()));
  return o >= 1 && o <= 8 ? o : 1;
}

Image apply_orientation(const Image& img, int o) {
  if (o < 2 || o > 8) return img;
  const bool swap = o >= 5;
  const int H = img.height, W = img.width, c = img.channels;
  Image out = img;
  out.height = swap ? W : H;
  out.width = swap ? H : W;
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sy = y, sx = x;
      switch (o) {
        case 2:
          sx = W - 1 - x;
          break;  // mirror left-right
        case 3:
          sy = H - 1 - y, sx = W - 1 - x;
          break;  // rotate 180
        case 4:
          sy = H - 1 - y;
          break;  // mirror top-bottom
        case 5:
          sy = x, sx = y;
          break;  // transpose
        case 6:
          sy = H - 1 - x, sx = y;
          break;  // rotate 90 clockwise
        case 7:
          sy = H - 1 - x, sx = W - 1 - y;
          break;  // transverse
        case 8:
          sy = x, sx = W - 1 - y;
          break;  // rotate 90 counter-clockwise
      }
      std::memcpy(&out.samples[(static_cast<std::size_t>(y) * out.width + x) * c],
                  &img.samples[(static_cast<std::size_t>(sy) * W + sx) * c], c);
    }
  return out;
}

std::vector<std::pair<std::string, std::string>> Spec::describe() const {
  auto size = [](int h, int w) { return std::to_string(h) + "," + std::to_string(w); };
  std::vector<std::pair<std::string, std::string>> d{
      {"resize", resize_short ? std::to_string(resize_short)
                 : resize_h   ? size(resize_h, resize_w)
                              : "none"},
      {"center_crop", crop_h ? size(crop_h, crop_w) : "none"},
      {"channels", channels_choices().name(channels)},
      {"normalize", mean.empty() ? "none" : join_numbers(mean) + ":" + join_numbers(std)},
      {"exif_transpose", exif_transpose ? "yes" : "no"}};
  // Only where it is set: the exact preprocessing's description (and caches' fingerprints) as before.
  if (jpeg_draft) d.emplace_back("jpeg_draft", "yes");
  return d;
}

void parse_resize(const std::string& text, Spec& spec) {
  bool single = false;
  auto [h, w] = parse_size(text, "--resize", &single);
  spec.resize_short = single ? h : 0;
  spec.resize_h = single ? 0 : h;
  spec.resize_w = single ? 0 : w;
}

void parse_center_crop(const std::string& text, Spec& spec) {
  std::tie(spec.crop_h, spec.crop_w) = parse_size(text, "--center-crop", nullptr);
}

void parse_normalize(const std::string& text, Spec& spec) {
  if (text == "imagenet") {
    spec.mean = {0.485, 0.456, 0.406};
    spec.std = {0.229, 0.224, 0.225};
    return;
  }
  auto colon = text.find(':');
  if (colon == std::string::npos)
    throw Error(Exit::usage, "--normalize", "expected imagenet or MEAN,..:STD,.., got '" + text + "'");
  spec.mean = parse_numbers(text.substr(0, colon), "--normalize");
  spec.std = parse_numbers(text.substr(colon + 1), "--normalize");
  if (spec.mean.size() != spec.std.size())
    throw Error(Exit::usage, "--normalize", "as many means as standard deviations are needed, got '" + text + "'");
  for (double s : spec.std)
    if (s <= 0) throw Error(Exit::usage, "--normalize", "standard deviations must be positive, got '" + text + "'");
}

Spec spec_from(const std::vector<std::pair<std::string, std::string>>& described) {
  Spec s;
  try {
    for (const auto& [k, v] : described) {
      if (v == "none") continue;
      if (k == "resize")
        parse_resize(v, s);
      else if (k == "center_crop")
        parse_center_crop(v, s);
      else if (k == "channels")
        s.channels = channels_choices().parse(v, k);
      else if (k == "normalize")
        parse_normalize(v, s);
      else if (k == "exif_transpose")
        s.exif_transpose = v == "yes";
      else if (k == "jpeg_draft")
        s.jpeg_draft = v == "yes";
      else
        throw Error(Exit::data, k, "unknown preprocessing step (written by a newer version?)");
    }
  } catch (const Error& e) {
    throw Error(Exit::data, "stored preprocessing spec", e.what());
  }
  return s;
}

void validate(const Spec& spec) {
  if (spec.jpeg_draft && !spec.resize_short && !spec.resize_h)
    throw Error(Exit::usage, "--jpeg-draft", "decodes JPEGs reduced for a resize: give --resize too");
  if (spec.jpeg_draft && !jpeg_parts_built())
    throw Error(Exit::unavailable, "--jpeg-draft",
                "this build decodes JPEGs whole only (it was built without libjpeg's headers: libjpeg-dev)");
  const std::size_t n = spec.mean.size();
  if (n > 1 && static_cast<int>(n) != spec.out_channels())
    throw Error(Exit::usage, "--normalize",
                std::to_string(n) + " values per statistic for " + std::to_string(spec.out_channels()) +
                    " channel(s) (--channels " + channels_choices().name(spec.channels) + "); give 1" +
                    (spec.out_channels() > 1 ? " or " + std::to_string(spec.out_channels()) : std::string()));
}

std::string padding_note(const Spec& spec) {
  if (!spec.crop_h) return "";
  const std::string crop = "--center-crop " + std::to_string(spec.crop_h) + "," + std::to_string(spec.crop_w);
  if (spec.resize_h && (spec.crop_h > spec.resize_h || spec.crop_w > spec.resize_w))
    return crop + " is larger than --resize " + std::to_string(spec.resize_h) + "," + std::to_string(spec.resize_w) +
           ": every image is padded with zeros to it (as torchvision's CenterCrop pads)";
  if (spec.resize_short && std::max(spec.crop_h, spec.crop_w) > spec.resize_short)
    return crop + " is larger than --resize " + std::to_string(spec.resize_short) +
           " makes an image's shorter side: such images are padded with zeros to it (as torchvision's CenterCrop pads)";
  return "";
}

std::pair<int, int> resized_size(const Spec& spec, int h, int w) {
  if (spec.resize_h) return {spec.resize_h, spec.resize_w};
  if (!spec.resize_short) return {h, w};
  const int shorter = std::min(h, w), longer = std::max(h, w);
  // torchvision: int(S * long / short), a float division truncated.
  const int new_long =
      static_cast<int>(static_cast<double>(int64_t{spec.resize_short} * longer) / static_cast<double>(shorter));
  return w <= h ? std::pair{new_long, spec.resize_short} : std::pair{spec.resize_short, new_long};
}

std::vector<int64_t> output_shape(const Spec& spec, int h, int w) {
  auto [rh, rw] = resized_size(spec, h, w);
  return {spec.out_channels(), spec.crop_h ? spec.crop_h : rh, spec.crop_w ? spec.crop_w : rw};
}

std::vector<int32_t> bilinear_weights(int in, int out) {
  const Kernel k = bilinear_kernel(in, out);
  std::vector<int32_t> m(static_cast<std::size_t>(out) * in, 0);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < k.count[o]; ++i)
      m[static_cast<std::size_t>(o) * in + k.first[o] + i] = k.fixed[static_cast<std::size_t>(o) * k.ksize + i];
  return m;
}

std::pair<int, int> crop_offsets(const Spec& spec, int h, int w) {
  const int oh = spec.crop_h ? spec.crop_h : h, ow = spec.crop_w ? spec.crop_w : w;
  // torchvision's CenterCrop: zero padding split (d // 2, (d + 1) // 2) when the crop is larger,
  // else an offset of round((size - crop) / 2) with Python's rounding.
  return {oh > h ? -((oh - h) / 2) : half_rounded_even(h - oh), ow > w ? -((ow - w) / 2) : half_rounded_even(w - ow)};
}

std::vector<uint8_t> resize_bilinear(const uint8_t* in, int h, int w, int c, int oh, int ow) {
  std::vector<uint8_t> cur(in, in + static_cast<std::size_t>(h) * w * c);
  if (ow != w) {  // horizontal first, as PIL does
    Kernel k = bilinear_kernel(w, ow);
    std::vector<uint8_t> next(static_cast<std::size_t>(h) * ow * c);
    resample_pass(cur.data(), next.data(), k, h, c, static_cast<std::ptrdiff_t>(w) * c, c,
                  static_cast<std::ptrdiff_t>(ow) * c, c);
    cur.swap(next);
    w = ow;
  }
  if (oh != h) {  // vertical: "lines" are columns, samples a row apart
    Kernel k = bilinear_kernel(h, oh);
    std::vector<uint8_t> next(static_cast<std::size_t>(oh) * w * c);
    resample_pass(cur.data(), next.data(), k, w, c, c, static_cast<std::ptrdiff_t>(w) * c, c,
                  static_cast<std::ptrdiff_t>(w) * c);
    cur.swap(next);
  }
  return cur;
}

namespace {

// Interleaved pixels of C channels handed to put(channel, index, sample) in C, H, W order, a pixel
// at a time (one pass over the bytes, C output streams; a pass a channel ran twice the instructions).
template <int C, class Put>
void put_planes(const uint8_t* px, std::size_t pixels, Put put) {
  static_assert(C >= 1 && C <= 4, "1 to 4 channels");
  for (std::size_t p = 0; p < pixels; ++p, px += C) {  // the channels unrolled: GCC -O2 does not
    put(0, p, px[0]);
    if constexpr (C > 1) put(1, pixels + p, px[1]);
    if constexpr (C > 2) put(2, 2 * pixels + p, px[2]);
    if constexpr (C > 3) put(3, 3 * pixels + p, px[3]);
  }
}

// Resize and center crop of `img` as `spec` asks, each output sample (C, H, W order) handed to
// put(channel, index, value): the 8-bit sample, or nullopt where the crop pads.
template <class Put>
void resize_and_crop(const Image& img, const Spec& spec, Put put) {
  int h = img.height, w = img.width;
  const int c = img.channels;
  const auto [file_h, file_w] = img.file_size();  // the resize's size comes from the file's
  // The usual case, a crop inside the resized image: only the crop's samples are resampled.
  if (Window win; crop_window(spec, file_h, file_w, win) && (c == 1 || c == 3 || c == 4)) {
    thread_local WindowBuffers buf;
    const ByteBuffer& out = resize_window(img, win, buf);
    const std::size_t pixels = static_cast<std::size_t>(win.oh) * win.ow;
    if (c == 3) return put_planes<3>(out.data(), pixels, put);
    if (c == 1) return put_planes<1>(out.data(), pixels, put);
    return put_planes<4>(out.data(), pixels, put);
  }
  if (!img.whole()) throw Error(Exit::internal, "resize", "part of an image outside a crop window");
  const uint8_t* px = img.samples.data();
  std::vector<uint8_t> resized;
  auto [rh, rw] = resized_size(spec, file_h, file_w);
  if (rh != h || rw != w) {
    resized = resize_bilinear(img.samples.data(), h, w, c, rh, rw);
    px = resized.data();
    h = rh;
    w = rw;
  }
  const int oh = spec.crop_h ? spec.crop_h : h, ow = spec.crop_w ? spec.crop_w : w;
  const auto [top, left] = crop_offsets(spec, h, w);
  std::size_t i = 0;
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < oh; ++y) {
      const int sy = y + top;
      for (int x = 0; x < ow; ++x, ++i) {
        const int sx = x + left;
        const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        put(ch, i, inside ? px[(static_cast<std::size_t>(sy) * w + sx) * c + ch] : 0);
      }
    }
}

}  // namespace

void preprocess(const Image& img, const Spec& spec, float* out) {
  const bool norm = !spec.mean.empty();
  float mean[4] = {0, 0, 0, 0}, sd[4] = {1, 1, 1, 1};
  for (int ch = 0; norm && ch < img.channels && ch < 4; ++ch) {
    const std::size_t mi = std::min<std::size_t>(ch, spec.mean.size() - 1);
    mean[ch] = static_cast<float>(spec.mean[mi]);
    sd[ch] = static_cast<float>(spec.std[mi]);
  }
  // Each channel's 256 values, computed as ToTensor and Normalize compute them, looked up.
  float value[4][256];
  for (int ch = 0; ch < img.channels && ch < 4; ++ch)
    for (int sample = 0; sample < 256; ++sample) {
      const float v = static_cast<float>(sample) / 255.f;  // ToTensor
      value[ch][sample] = norm ? (v - mean[ch]) / sd[ch] : v;
    }
  resize_and_crop(img, spec, [&](int ch, std::size_t i, uint8_t sample) { out[i] = value[ch][sample]; });
}

void preprocess_pixels(const Image& img, const Spec& spec, uint8_t* out) {
  resize_and_crop(img, spec, [out](int, std::size_t i, uint8_t sample) { out[i] = sample; });
}

}  // namespace traincache::io::image
