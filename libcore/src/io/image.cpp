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
#include "simd_clones.h"
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
  img.samples.resize(static_cast<std::size_t>(w) * h * img.channels);
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
  img.samples.resize(out_size);
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

// PIL's antialiased bilinear weights for resampling `in` samples to `out`: for output i, the
// inputs first[i] .. first[i] + count[i] - 1 with weights in 22-bit fixed point.
struct Kernel {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> fixed;
};

Kernel bilinear_kernel(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = filterscale;  // the bilinear (triangle) filter has support 1
  Kernel k;
  k.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  k.first.resize(out);
  k.count.resize(out);
  k.fixed.assign(static_cast<std::size_t>(out) * k.ksize, 0);
  std::vector<double> w(static_cast<std::size_t>(k.ksize));
  for (int o = 0; o < out; ++o) {
    const double center = (o + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
    double sum = 0;
    for (int x = lo; x < hi; ++x) {
      double t = std::fabs((x - center + 0.5) / filterscale);
      w[x - lo] = t < 1.0 ? 1.0 - t : 0.0;
      sum += w[x - lo];
    }
    for (int x = 0; x < hi - lo; ++x) {
      if (sum != 0) w[x] /= sum;
      k.fixed[static_cast<std::size_t>(o) * k.ksize + x] =
          static_cast<int32_t>(w[x] * (1 << kResampleBits) + (w[x] < 0 ? -0.5 : 0.5));
    }
    k.first[o] = lo;
    k.count[o] = hi - lo;
  }
  return k;
}

// bilinear_kernel(in, out) of one thread's last few sizes: decode_for asks for a photo's kernels
// and the resize again, and collections repeat their sizes. Shared, so that a kernel in use stays
// whole when a later call replaces its entry (a photo's two axes: the first one's kernel can be the
// entry the second one's replaces).
std::shared_ptr<const Kernel> cached_kernel(int in, int out) {
  struct Entry {
    int in = 0, out = 0;
    std::shared_ptr<const Kernel> k;
  };
  thread_local std::array<Entry, 8> cache;
  thread_local std::size_t next = 0;
  for (const Entry& e : cache)
    if (e.k && e.in == in && e.out == out) return e.k;
  Entry& e = cache[next++ % cache.size()];
  e = Entry{in, out, std::make_shared<const Kernel>(bilinear_kernel(in, out))};
  return e.k;
}

// The kernel of an axis resized from `in` to `out`; null when it is not resized.
std::shared_ptr<const Kernel> axis_kernel(int in, int out) { return in == out ? nullptr : cached_kernel(in, out); }

// One resampling pass along an axis: `lines` lines (`in_line` samples apart) of samples `in_step`
// apart, each `c` channels, into lines of k.first.size() samples, in PIL's fixed point.
void resample_pass(const uint8_t* in, uint8_t* out, const Kernel& k, int lines, int c, std::ptrdiff_t in_line,
                   std::ptrdiff_t in_step, std::ptrdiff_t out_line, std::ptrdiff_t out_step) {
  const int out_len = static_cast<int>(k.first.size());
  for (int l = 0; l < lines; ++l) {
    for (int o = 0; o < out_len; ++o) {
      const uint8_t* src = in + l * in_line + k.first[o] * in_step;
      const int32_t* w = &k.fixed[static_cast<std::size_t>(o) * k.ksize];
      for (int ch = 0; ch < c; ++ch) {
        int64_t acc = int64_t{1} << (kResampleBits - 1);
        for (int i = 0; i < k.count[o]; ++i) acc += int64_t{src[i * in_step + ch]} * w[i];
        out[l * out_line + o * out_step + ch] = static_cast<uint8_t>(std::clamp<int64_t>(acc >> kResampleBits, 0, 255));
      }
    }
  }
}

// The windowed passes accumulate in int32: the weights are non-negative and sum to about
// 1 << kResampleBits, so 255 times their sum (plus the rounding half) fits an int32 exactly, the
// same value PIL's int accumulator gives. They compute with vector extensions in vectors of L int32
// lanes, L being what the CPU's registers hold (simd_lanes(): 16 with AVX-512, 8 with AVX2, 4
// otherwise), each pass built once for each L with that instruction set (simd_clones.h).
template <int L>
struct Lanes {
  typedef uint8_t Bytes __attribute__((vector_size(L)));
  typedef uint16_t Shorts __attribute__((vector_size(2 * L)));
  typedef int32_t Ints __attribute__((vector_size(4 * L)));
};
template <int L>
using Ints = typename Lanes<L>::Ints;
template <int L>
using Bytes = typename Lanes<L>::Bytes;

constexpr int32_t kHalf = int32_t{1} << (kResampleBits - 1);

template <int L>
TC_SIMD_INLINE Bytes<L> load_bytes(const uint8_t* p) {
  Bytes<L> b;
  std::memcpy(&b, p, sizeof b);
  return b;
}
// Wide vectors are passed by reference, not returned: GCC warns that a 32- or 64-byte vector's
// return differs between instruction sets (-Wpsabi), and the warning is an error in two legs.
template <int L>
TC_SIMD_INLINE void load_ints(Ints<L>& v, const int32_t* p) {
  std::memcpy(&v, p, sizeof v);
}

// 8-bit samples go to 32-bit lanes and back through 16 bits: GCC 12 converts 8 <-> 32 bits lane by
// lane, and each half of the way with SIMD instructions.

// acc += the L samples b times w.
template <int L>
TC_SIMD_INLINE void add_widened(Ints<L>& acc, Bytes<L> b, const Ints<L>& w) {
  acc += __builtin_convertvector(__builtin_convertvector(b, typename Lanes<L>::Shorts), Ints<L>) * w;
}
// acc += the L samples b times the L weights at w.
template <int L>
TC_SIMD_INLINE void add_weighted(Ints<L>& acc, Bytes<L> b, const int32_t* w) {
  Ints<L> wv;
  load_ints<L>(wv, w);
  add_widened<L>(acc, b, wv);
}
// Eight bytes at p, each to an int32 lane (samples) or an RGB chunk's two pixels spread to four
// lanes each (rgb), for 8 lanes (AVX2): the bytes broadcast to both halves and picked with zeros
// inside each half, three instructions where converting through 16 bits takes eight.
typedef uint64_t Quads __attribute__((vector_size(32)));
typedef uint8_t Bytes32 __attribute__((vector_size(32)));
TC_SIMD_INLINE void broadcast8(const uint8_t* p, Bytes32& b) {
  uint64_t q;
  std::memcpy(&q, p, sizeof q);
  const Quads quads = Quads{} + q;
  std::memcpy(&b, &quads, sizeof b);
}
TC_SIMD_INLINE void widen8_samples(const uint8_t* p, Ints<8>& v) {
  const Bytes32 z = {};
  Bytes32 b;
  broadcast8(p, b);
  b = __builtin_shufflevector(b, z, 0, 32, 32, 32, 1, 32, 32, 32, 2, 32, 32, 32, 3, 32, 32, 32, 20, 48, 48, 48, 21, 48,
                              48, 48, 22, 48, 48, 48, 23, 48, 48, 48);
  std::memcpy(&v, &b, sizeof v);
}
TC_SIMD_INLINE void widen8_rgb(const uint8_t* p, Ints<8>& v) {
  const Bytes32 z = {};
  Bytes32 b;
  broadcast8(p, b);
  b = __builtin_shufflevector(b, z, 0, 32, 32, 32, 1, 32, 32, 32, 2, 32, 32, 32, 2, 32, 32, 32, 19, 48, 48, 48, 20, 48,
                              48, 48, 21, 48, 48, 48, 21, 48, 48, 48);
  std::memcpy(&v, &b, sizeof v);
}
// Sums with the rounding half added, as L bytes: shifted to 8 bits and clipped, as PIL's clip8.
template <int L>
TC_SIMD_INLINE Bytes<L> clip_bytes(const Ints<L>& sum) {
  Ints<L> acc = sum >> kResampleBits;
  acc = acc < 0 ? 0 : acc;
  acc = acc > 255 ? 255 : acc;
  return __builtin_convertvector(__builtin_convertvector(acc, typename Lanes<L>::Shorts), Bytes<L>);
}

TC_SIMD_INLINE uint8_t clip8(int32_t acc) { return static_cast<uint8_t>(std::clamp(acc >> kResampleBits, 0, 255)); }

// How the horizontal pass reads a row, for vectors of `lanes` lanes: each output column's taps in
// `chunks` loads of `lanes` bytes, `step` bytes apart, from byte offset[x]; the `lanes` weights of
// column x's chunk g begin at weights[(x * chunks + g) * lanes]. An RGB chunk is lanes / 4 pixels
// (the load's last lanes / 4 bytes unused), spread to four lanes each (the fourth weighted 0); a
// grey chunk is `lanes` samples.
struct HorizontalTaps {
  int lanes = 0, chunks = 0, step = 0;
  std::vector<int> offset;
  std::vector<int32_t> weights;
};

// Chunks of taps a column may have, with 16 lanes (RGB: 32 taps, downscaling by up to about 15,
// 4000 x 3000 to 256); as many taps with fewer lanes.
constexpr int kMaxChunks16 = 8;

// Kernel k's output columns [left, left + n) laid out for rows of w pixels of c (1 or 3) channels,
// whose first is the image's column `origin`, for vectors of `lanes` lanes: each column's first tap
// moved left where the chunks would run past the row's end (its weights moved with it). False when
// that does not fit (a row shorter than the chunks, or more taps than kMaxChunks16 allows).
bool horizontal_taps(const Kernel& k, int w, int c, int origin, int left, int n, int lanes, HorizontalTaps& t) {
  const int per_chunk = c == 3 ? lanes / 4 : lanes, spread = c == 3 ? 4 : 1;
  const int taps = *std::max_element(k.count.begin() + left, k.count.begin() + left + n);
  t.lanes = lanes;
  t.chunks = (taps + per_chunk - 1) / per_chunk;
  t.step = per_chunk * c;
  const int span = t.chunks * per_chunk;  // pixels the chunks cover
  if (t.chunks > kMaxChunks16 * 16 / lanes || w < span) return false;
  t.offset.resize(static_cast<std::size_t>(n));
  t.weights.assign(static_cast<std::size_t>(n) * t.chunks * lanes, 0);
  for (int x = 0; x < n; ++x) {
    const int col = left + x, first = k.first[col] - origin;
    const int s0 = std::min(first, w - span);
    t.offset[x] = s0 * c;
    for (int i = 0; i < k.count[col]; ++i) {
      const int tap = first - s0 + i;
      int32_t* v = &t.weights[(static_cast<std::size_t>(x) * t.chunks + tap / per_chunk) * lanes];
      for (int ch = 0; ch < c; ++ch)
        v[(tap % per_chunk) * spread + ch] = k.fixed[static_cast<std::size_t>(col) * k.ksize + i];
    }
  }
  return true;
}

// An RGB chunk's L / 4 pixels spread to four lanes a pixel (the fourth repeats the third).
template <int L>
TC_SIMD_INLINE Bytes<L> spread_rgb(Bytes<L> b) {
  if constexpr (L == 16) {
    return __builtin_shufflevector(b, b, 0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11);
  } else if constexpr (L == 8) {
    return __builtin_shufflevector(b, b, 0, 1, 2, 2, 3, 4, 5, 5);
  } else {
    static_assert(L == 4, "RGB chunks of 1, 2 or 4 pixels");
    return __builtin_shufflevector(b, b, 0, 1, 2, 2);
  }
}

// One output column's accumulator of its RGB chunks: G of them, or t.chunks where G is 0.
template <int L, int G>
TC_SIMD_INLINE void rgb_column(const uint8_t* line, const HorizontalTaps& t, int x, Ints<L>& acc) {
  const uint8_t* src = line + t.offset[x];
  const int32_t* wv = &t.weights[static_cast<std::size_t>(x) * t.chunks * L];
  const int chunks = G ? G : t.chunks;
  acc = Ints<L>{};
  for (int g = 0; g < chunks; ++g) {
    if constexpr (L == 8) {
      Ints<L> v, w;
      widen8_rgb(src + g * t.step, v);
      load_ints<L>(w, wv + g * L);
      acc += v * w;
    } else {
      add_weighted<L>(acc, spread_rgb<L>(load_bytes<L>(src + g * t.step)), wv + g * L);
    }
  }
}

// L / 4 columns' accumulators (a[p]: lanes 4q + ch, chunk pixel q's channel ch) folded into one
// vector whose lanes 4p + ch are column p's channel ch: each column's pixels summed.
template <int L>
TC_SIMD_INLINE void fold_columns(const Ints<L>* a, Ints<L>& sum) {
  if constexpr (L == 16) {
    const Ints<L> ab =
        __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
        __builtin_shufflevector(a[0], a[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const Ints<L> cd =
        __builtin_shufflevector(a[2], a[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
        __builtin_shufflevector(a[2], a[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    sum = __builtin_shufflevector(ab, cd, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
          __builtin_shufflevector(ab, cd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  } else if constexpr (L == 8) {
    sum = __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 8, 9, 10, 11) +
          __builtin_shufflevector(a[0], a[1], 4, 5, 6, 7, 12, 13, 14, 15);
  } else {
    sum = a[0];
  }
}

// L / 4 columns' bytes (lanes 4p + ch) stored as 3 bytes a column.
template <int L>
TC_SIMD_INLINE void store_rgb(Bytes<L> v, uint8_t* o, bool whole) {
  if constexpr (L == 16) {
    v = __builtin_shufflevector(v, v, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 15, 15, 15);
  } else if constexpr (L == 8) {
    v = __builtin_shufflevector(v, v, 0, 1, 2, 4, 5, 6, 7, 7);
  }
  if (whole) {
    std::memcpy(o, &v, L);  // one store; the next columns' store replaces the bytes past these
  } else {
    std::memcpy(o, &v, L / 4 * 3);
  }
}

// Output columns [0, to) of one RGB row, L / 4 at a time: their accumulators folded together,
// rounded, clipped and stored.
template <int L, int G>
TC_SIMD_INLINE int horizontal_rgb(const uint8_t* line, const HorizontalTaps& t, int to, uint8_t* o) {
  constexpr int kColumns = L / 4;
  int x = 0;
  for (; x + kColumns <= to; x += kColumns) {
    Ints<L> a[kColumns], sum;
    for (int p = 0; p < kColumns; ++p) rgb_column<L, G>(line, t, x + p, a[p]);
    fold_columns<L>(a, sum);
    store_rgb<L>(clip_bytes<L>(sum + kHalf), o + x * 3, x + 2 * kColumns <= to);
  }
  return x;
}

// Output columns [0, to) of one grey row: L taps a chunk, summed across the lanes.
template <int L, int G>
TC_SIMD_INLINE int horizontal_grey(const uint8_t* line, const HorizontalTaps& t, int to, uint8_t* o) {
  const int chunks = G ? G : t.chunks;
  for (int x = 0; x < to; ++x) {
    const uint8_t* src = line + t.offset[x];
    const int32_t* wv = &t.weights[static_cast<std::size_t>(x) * t.chunks * L];
    Ints<L> a = Ints<L>{};
    for (int g = 0; g < chunks; ++g) add_weighted<L>(a, load_bytes<L>(src + g * t.step), wv + g * L);
    int32_t sum = kHalf;
    for (int i = 0; i < L; ++i) sum += a[i];
    o[x] = clip8(sum);
  }
  return to;
}

// Output columns [from, to) one sample at a time, reading only the chunks' taps (no byte past
// them: the last row's last columns, and an RGB row's last few).
TC_SIMD_INLINE void horizontal_exact(const uint8_t* line, const HorizontalTaps& t, int c, int from, int to,
                                     uint8_t* o) {
  const int per_chunk = c == 3 ? t.lanes / 4 : t.lanes, spread = c == 3 ? 4 : 1;
  for (int x = from; x < to; ++x) {
    const uint8_t* src = line + t.offset[x];
    const int32_t* wv = &t.weights[static_cast<std::size_t>(x) * t.chunks * t.lanes];
    for (int ch = 0; ch < c; ++ch) {
      int32_t acc = kHalf;
      for (int i = 0; i < t.chunks * per_chunk; ++i)
        acc += int32_t{src[i * c + ch]} * wv[(i / per_chunk) * t.lanes + (i % per_chunk) * spread + ch];
      o[x * c + ch] = clip8(acc);
    }
  }
}

template <int L, int C, int G>
TC_SIMD_INLINE void horizontal_rows(const uint8_t* in, int rows, int w, const HorizontalTaps& t, int n, uint8_t* out,
                                    bool image_end) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* line = in + static_cast<std::ptrdiff_t>(r) * w * C;
    uint8_t* o = out + static_cast<std::ptrdiff_t>(r) * n * C;
    int safe = n;  // a chunk reads its L bytes: not past the image's last one
    if (image_end && r == rows - 1)
      while (safe > 0 && t.offset[safe - 1] + (t.chunks - 1) * t.step + L > w * C) --safe;
    int done = 0;
    if constexpr (C == 3) {
      done = horizontal_rgb<L, G>(line, t, safe, o);
    } else {
      done = horizontal_grey<L, G>(line, t, safe, o);
    }
    horizontal_exact(line, t, C, done, n, o);
  }
}

// Columns of up to 8 chunks have their loop unrolled (G, the chunks); longer ones loop (G 0).
template <int L, int C, int G = 1>
TC_SIMD_INLINE void horizontal_chunks(const uint8_t* in, int rows, int w, const HorizontalTaps& t, int n, uint8_t* out,
                                      bool image_end) {
  if constexpr (G < 8) {
    if (t.chunks > G) return horizontal_chunks<L, C, G + 1>(in, rows, w, t, n, out, image_end);
    horizontal_rows<L, C, G>(in, rows, w, t, n, out, image_end);
  } else {
    if (t.chunks > G) return horizontal_rows<L, C, 0>(in, rows, w, t, n, out, image_end);
    horizontal_rows<L, C, G>(in, rows, w, t, n, out, image_end);
  }
}

// The horizontal pass over `rows` rows of `w` pixels of c (1 or 3) channels, for the n output
// columns `t` lays out, into rows of n pixels. `in` ends where the image does when `image_end`.
template <int L>
TC_SIMD_INLINE void horizontal_lanes(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n,
                                     uint8_t* out, bool image_end) {
  if (c == 3) return horizontal_chunks<L, 3>(in, rows, w, t, n, out, image_end);
  horizontal_chunks<L, 1>(in, rows, w, t, n, out, image_end);
}

TC_SIMD_16 void horizontal_16(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n, uint8_t* out,
                              bool image_end) {
  horizontal_lanes<16>(in, rows, w, c, t, n, out, image_end);
}
TC_SIMD_8 void horizontal_8(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n, uint8_t* out,
                            bool image_end) {
  horizontal_lanes<8>(in, rows, w, c, t, n, out, image_end);
}
void horizontal_4(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n, uint8_t* out,
                  bool image_end) {
  horizontal_lanes<4>(in, rows, w, c, t, n, out, image_end);
}

// The horizontal pass of the window: output columns [left, left + n) of kernel k from rows of w
// pixels beginning at the image's column `origin`, chunked where horizontal_taps lays them out, else
// resample_pass over the window's columns.
void horizontal_window(const uint8_t* in, int rows, int w, int origin, int c, const Kernel& k, int left, int n,
                       uint8_t* out, bool image_end, HorizontalTaps& taps) {
  const int lanes = simd_lanes();
  if ((c == 1 || c == 3) && horizontal_taps(k, w, c, origin, left, n, lanes, taps)) {
    if (lanes == 16) return horizontal_16(in, rows, w, c, taps, n, out, image_end);
    if (lanes == 8) return horizontal_8(in, rows, w, c, taps, n, out, image_end);
    return horizontal_4(in, rows, w, c, taps, n, out, image_end);
  }
  Kernel sub;
  sub.ksize = k.ksize;
  sub.first.assign(k.first.begin() + left, k.first.begin() + left + n);
  for (int& f : sub.first) f -= origin;
  sub.count.assign(k.count.begin() + left, k.count.begin() + left + n);
  sub.fixed.assign(k.fixed.begin() + static_cast<std::ptrdiff_t>(left) * k.ksize,
                   k.fixed.begin() + static_cast<std::ptrdiff_t>(left + n) * k.ksize);
  resample_pass(in, out, sub, rows, c, static_cast<std::ptrdiff_t>(w) * c, c, static_cast<std::ptrdiff_t>(n) * c, c);
}

// The vertical pass for output rows [top, top + n) of kernel `k`, row by row: each output row is
// the weighted sum of whole input rows (`in` holds input rows from `row0`, `len` samples each), so
// every load is contiguous, L samples at a time.
template <int L>
TC_SIMD_INLINE void vertical_lanes(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n,
                                   uint8_t* out) {
  for (int y = 0; y < n; ++y) {
    const int o = top + y;
    const int32_t* wt = &k.fixed[static_cast<std::size_t>(o) * k.ksize];
    const uint8_t* rows = in + static_cast<std::ptrdiff_t>(k.first[o] - row0) * len;
    uint8_t* dst = out + static_cast<std::ptrdiff_t>(y) * len;
    int x = 0;
    for (; x + L <= len; x += L) {
      Ints<L> acc = Ints<L>{} + kHalf;
      for (int i = 0; i < k.count[o]; ++i) {
        const uint8_t* p = rows + static_cast<std::ptrdiff_t>(i) * len + x;
        if constexpr (L == 8) {
          Ints<L> v;
          widen8_samples(p, v);
          acc += v * wt[i];
        } else {
          add_widened<L>(acc, load_bytes<L>(p), Ints<L>{} + wt[i]);
        }
      }
      const Bytes<L> v = clip_bytes<L>(acc);
      std::memcpy(dst + x, &v, sizeof v);
    }
    for (; x < len; ++x) {
      int32_t acc = kHalf;
      for (int i = 0; i < k.count[o]; ++i) acc += int32_t{rows[static_cast<std::ptrdiff_t>(i) * len + x]} * wt[i];
      dst[x] = clip8(acc);
    }
  }
}

TC_SIMD_16 void vertical_16(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out) {
  vertical_lanes<16>(in, row0, len, k, top, n, out);
}
TC_SIMD_8 void vertical_8(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out) {
  vertical_lanes<8>(in, row0, len, k, top, n, out);
}
void vertical_4(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out) {
  vertical_lanes<4>(in, row0, len, k, top, n, out);
}

void vertical_window(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out) {
  const int lanes = simd_lanes();
  if (lanes == 16) return vertical_16(in, row0, len, k, top, n, out);
  if (lanes == 8) return vertical_8(in, row0, len, k, top, n, out);
  vertical_4(in, row0, len, k, top, n, out);
}

// What one reader thread reuses from image to image: no allocation per image once warm.
struct WindowBuffers {
  std::vector<uint8_t> rows, window;
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
const std::vector<uint8_t>& resize_window(const Image& img, const Window& win, WindowBuffers& buf) {
  const int h = img.height, w = img.width, c = img.channels;
  const Image::Part part = img.whole() ? Image::Part{0, 0, h, w} : img.part;
  const auto ky = axis_kernel(h, win.rh);
  const auto kx = axis_kernel(w, win.rw);
  const auto [row0, row1] = reached(ky.get(), win.top, win.oh);
  const int len = win.ow * c;
  buf.rows.resize(static_cast<std::size_t>(row1 - row0) * len);
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
  buf.window.resize(static_cast<std::size_t>(win.oh) * len);
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

bool jpeg_complete(const unsigned char* b, std::size_t n) {
  if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return false;
  std::size_t p = 2;  // after SOI: marker segments up to the first scan's (SOS, 0xDA)
  while (true) {
    if (p >= n || b[p] != 0xFF) return false;  // a marker must begin here
    while (p < n && b[p] == 0xFF) ++p;         // after any fill bytes
    if (p >= n) return false;
    const unsigned char m = b[p++];
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // TEM, RSTn: no length
    if (m == 0xD9 || p + 2 > n) return false;             // EOI before any scan; a cut length
    const std::size_t len = (std::size_t{b[p]} << 8) | b[p + 1];
    if (len < 2) return false;
    p += len;
    if (m == 0xDA) break;
  }
  // In entropy-coded data 0xFF is followed by 0x00 or a marker, so an FF D9 from here is EOI: most
  // files end with it, and only the others are searched.
  if (p + 2 <= n && b[n - 2] == 0xFF && b[n - 1] == 0xD9) return true;
  for (; p + 1 < n; ++p) {
    const void* ff = std::memchr(b + p, 0xFF, n - 1 - p);
    if (!ff) return false;
    p = static_cast<std::size_t>(static_cast<const unsigned char*>(ff) - b);
    if (b[p + 1] == 0xD9) return true;
  }
  return false;
}

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

std::vector<uint8_t> resize_bilinear(const std::vector<uint8_t>& in, int h, int w, int c, int oh, int ow) {
  std::vector<uint8_t> cur = in;
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
    const std::vector<uint8_t>& out = resize_window(img, win, buf);
    const std::size_t n = static_cast<std::size_t>(win.oh) * win.ow * c;
    std::size_t i = 0;
    for (int ch = 0; ch < c; ++ch)
      for (std::size_t p = static_cast<std::size_t>(ch); p < n; p += c, ++i) put(ch, i, out[p]);
    return;
  }
  if (!img.whole()) throw Error(Exit::internal, "resize", "part of an image outside a crop window");
  const std::vector<uint8_t>* px = &img.samples;
  std::vector<uint8_t> resized;
  auto [rh, rw] = resized_size(spec, file_h, file_w);
  if (rh != h || rw != w) {
    resized = resize_bilinear(img.samples, h, w, c, rh, rw);
    px = &resized;
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
        put(ch, i, inside ? (*px)[(static_cast<std::size_t>(sy) * w + sx) * c + ch] : 0);
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
