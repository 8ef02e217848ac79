#include "traincache/io/png_direct.h"

#ifdef TRAINCACHE_HAVE_LIBDEFLATE

#include <libdeflate.h>

#include <cstdlib>
#include <cstring>

#include "simd_clones.h"

namespace traincache::io::png_direct {

namespace {

uint32_t be32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

struct Header {
  uint32_t width = 0, height = 0;
  int channels = 0;
};

// IHDR's 13 bytes: true for 8-bit grey or RGB, deflate, the standard filters, not interlaced.
bool read_header(const unsigned char* d, Header& h) {
  h.width = be32(d);
  h.height = be32(d + 4);
  const int depth = d[8], color = d[9];
  if (depth != 8 || (color != 0 && color != 2) || d[10] != 0 || d[11] != 0 || d[12] != 0) return false;
  h.channels = color == 2 ? 3 : 1;
  return h.width > 0 && h.height > 0;
}

// Walks the chunks: IHDR first, the IDAT chunks in one run (their data appended to `z`), IEND last
// with nothing after it, every CRC right; no tRNS (libspng's path decides what it means), no
// critical chunk but these and an RGB image's suggested palette. False for anything else.
bool read_chunks(const unsigned char* p, std::size_t size, Header& h, std::vector<uint8_t>& z) {
  if (size < 8 || std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0) return false;
  z.clear();
  std::size_t pos = 8;
  bool idat_done = false;
  for (int i = 0; pos + 12 <= size; ++i) {
    const uint32_t n = be32(p + pos);
    const unsigned char* type = p + pos + 4;
    if (n > size - pos - 12 || libdeflate_crc32(0, type, n + 4) != be32(type + 4 + n)) return false;
    const unsigned char* data = type + 4;
    const bool ihdr = std::memcmp(type, "IHDR", 4) == 0, idat = std::memcmp(type, "IDAT", 4) == 0;
    if ((i == 0) != ihdr || (ihdr && (n != 13 || !read_header(data, h)))) return false;
    if (idat) {
      if (idat_done) return false;
      z.insert(z.end(), data, data + n);
    } else if (!z.empty()) {
      idat_done = true;
    }
    pos += 12 + n;
    if (std::memcmp(type, "IEND", 4) == 0) return n == 0 && pos == size && !z.empty();
    const bool critical = (type[0] & 0x20) == 0;
    if (std::memcmp(type, "tRNS", 4) == 0 ||
        (critical && !ihdr && !idat && !(std::memcmp(type, "PLTE", 4) == 0 && h.channels == 3 && z.empty())))
      return false;
  }
  return false;  // no IEND: truncated
}

typedef int16_t Pixel4 __attribute__((vector_size(8)));  // one pixel's channels, widened
typedef uint8_t Bytes4 __attribute__((vector_size(4)));

TC_SIMD_INLINE Pixel4 load_pixel(const uint8_t* p) {
  Bytes4 v;
  std::memcpy(&v, p, 4);
  return __builtin_convertvector(v, Pixel4);
}

// Paeth on a row of 3-byte pixels, a pixel's channels at once: PNG's predictor picks, per sample,
// whichever of left (a), up (b) and up-left (c) is nearest to a + b - c, a before b before c on
// ties. `x` and `prior` are read 4 bytes a pixel (one past the row: the caller's slack).
TC_SIMD_CLONES void paeth3(uint8_t* out, const uint8_t* x, const uint8_t* prior, std::size_t n) {
  Pixel4 a = {0, 0, 0, 0}, c = {0, 0, 0, 0};
  for (std::size_t i = 0; i < n; i += 3) {
    const Pixel4 b = load_pixel(prior + i);
    Pixel4 pa = b - c, pb = a - c, pc = a + b - c - c;
    pa = pa < 0 ? -pa : pa;
    pb = pb < 0 ? -pb : pb;
    pc = pc < 0 ? -pc : pc;
    const Pixel4 pred = (pa <= pb) & (pa <= pc) ? a : (pb <= pc ? b : c);
    a = (load_pixel(x + i) + pred) & 0xff;
    c = b;
    const Bytes4 o = __builtin_convertvector(a, Bytes4);
    std::memcpy(out + i, &o, 3);
  }
}

// Paeth a sample at a time, for grey rows.
void paeth(uint8_t* out, const uint8_t* x, const uint8_t* prior, std::size_t n, std::size_t bpp) {
  for (std::size_t i = 0; i < n; ++i) {
    const int a = i >= bpp ? out[i - bpp] : 0, b = prior[i], c = i >= bpp ? prior[i - bpp] : 0;
    const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
    out[i] = static_cast<uint8_t>(x[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c));
  }
}

// Row `out` from its filtered bytes `x` (after the filter byte `filter`) and the row above;
// false for a filter PNG does not define.
bool unfilter_row(int filter, uint8_t* out, const uint8_t* x, const uint8_t* prior, std::size_t n, std::size_t bpp) {
  switch (filter) {
    case 0:
      std::memcpy(out, x, n);
      return true;
    case 1:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(x[i] + (i >= bpp ? out[i - bpp] : 0));
      return true;
    case 2:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(x[i] + prior[i]);
      return true;
    case 3:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<uint8_t>(x[i] + (((i >= bpp ? out[i - bpp] : 0) + prior[i]) >> 1));
      return true;
    case 4:
      if (bpp == 3)
        paeth3(out, x, prior, n);
      else
        paeth(out, x, prior, n, bpp);
      return true;
    default:
      return false;
  }
}

struct Decompressor {
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  ~Decompressor() {
    if (d) libdeflate_free_decompressor(d);
  }
};

// What each reader thread keeps between images: no allocation per image once they have grown.
struct Buffers {
  Decompressor inflate;
  std::vector<uint8_t> z, raw, zero;
};

}  // namespace

bool available() { return true; }

bool decode(const unsigned char* bytes, std::size_t size, int64_t max_pixels, ByteBuffer& samples, int& width,
            int& height, int& channels) {
  thread_local Buffers b;
  Header h;
  if (!b.inflate.d || !read_chunks(bytes, size, h, b.z)) return false;
  if (int64_t{h.width} * h.height > max_pixels) return false;
  const std::size_t stride = std::size_t{h.width} * h.channels, rows = h.height;
  b.raw.resize((stride + 1) * rows + 4);  // 4: paeth3 reads a byte past each row
  std::size_t in = 0, out = 0;
  if (libdeflate_zlib_decompress_ex(b.inflate.d, b.z.data(), b.z.size(), b.raw.data(), b.raw.size() - 4, &in, &out) !=
          LIBDEFLATE_SUCCESS ||
      in != b.z.size() || out != b.raw.size() - 4)
    return false;
  b.zero.assign(stride + 4, 0);
  resize_for_overwrite(samples, stride * rows);  // a row's reads past its end fall in the next row
  for (std::size_t r = 0; r < rows; ++r) {
    const uint8_t* x = b.raw.data() + r * (stride + 1);
    uint8_t* row = samples.data() + r * stride;
    if (!unfilter_row(x[0], row, x + 1, r ? row - stride : b.zero.data(), stride, h.channels)) return false;
  }
  width = static_cast<int>(h.width);
  height = static_cast<int>(h.height);
  channels = h.channels;
  return true;
}

}  // namespace traincache::io::png_direct

#else  // without libdeflate: every PNG goes to libspng

namespace traincache::io::png_direct {

bool available() { return false; }

bool decode(const unsigned char*, std::size_t, int64_t, ByteBuffer&, int&, int&, int&) { return false; }

}  // namespace traincache::io::png_direct

#endif
