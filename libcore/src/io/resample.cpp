// PIL's antialiased bilinear resampling (resample.h); docs/design.md says why it is ours and how
// its vector code is built.
#include "resample.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "simd_clones.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "traincache/io/image.h"

namespace traincache::io::image {

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

namespace {

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

}  // namespace

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

namespace {

// The windowed passes accumulate in int32: the weights are non-negative and sum to about
// 1 << kResampleBits, so 255 times their sum (plus the rounding half) fits an int32 exactly, the
// same value PIL's int accumulator gives. They compute with vector extensions in vectors of L int32
// lanes, L being what the CPU's registers hold (simd_lanes(): 16 with AVX-512, 8 with AVX2, 4
// otherwise; the horizontal pass at most 8), each pass built once for each L with that instruction
// set (simd_clones.h).
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

template <int L>
TC_SIMD_INLINE void widen(Bytes<L> b, Ints<L>& v) {
  v = __builtin_convertvector(__builtin_convertvector(b, typename Lanes<L>::Shorts), Ints<L>);
}
// Eight bytes at p, each to an int32 lane, for 8 lanes (AVX2): the bytes broadcast to both halves
// and picked with zeros inside each half, three instructions where converting through 16 bits
// takes eight.
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
// Sums with the rounding half added, as L bytes: shifted to 8 bits and clipped, as PIL's clip8.
template <int L>
TC_SIMD_INLINE Bytes<L> clip_bytes(const Ints<L>& sum) {
  Ints<L> acc = sum >> kResampleBits;
  acc = acc < 0 ? 0 : acc;
  acc = acc > 255 ? 255 : acc;
  return __builtin_convertvector(__builtin_convertvector(acc, typename Lanes<L>::Shorts), Bytes<L>);
}

TC_SIMD_INLINE uint8_t clip8(int32_t acc) { return static_cast<uint8_t>(std::clamp(acc >> kResampleBits, 0, 255)); }

// The pmaddwd layout of 8-lane RGB taps (t.weights: chunks of two pixels, four lanes a pixel): per
// column and pair of chunks (four pixels), 16 int16 of the weights' high parts (w >> 11) and 16 of
// their low 11 bits, each half of 8 pairing two pixels: [w0 w1 w0 w1 w0 w1 0 0 | w2 w3 w2 w3 ...],
// for samples laid out [R0 R1 G0 G1 B0 B1 0 0 | R2 R3 ...]. sum(s * w) = (sum(s * hi) << 11) +
// sum(s * lo) exactly: a weight is at most 1 << 22, so its high part fits 16 bits, and each
// product and pair sum fits 32.
void pair_weights(HorizontalTaps& t, int n) {
  t.pair_weights.assign(static_cast<std::size_t>(n) * t.pairs * 32, 0);
  for (int x = 0; x < n; ++x)
    for (int g = 0; g < t.pairs; ++g) {
      const int32_t* v = &t.weights[(static_cast<std::size_t>(x) * t.chunks + 2 * g) * 8];  // two chunks
      int16_t* hl = &t.pair_weights[(static_cast<std::size_t>(x) * t.pairs + g) * 32];
      for (int half = 0; half < 2; ++half)         // pixels 0, 1 and 2, 3 of the pair
        for (int p = 0; p < 2; ++p) {              // the pixel within its chunk
          const int32_t wt = v[half * 8 + p * 4];  // its R lane (G and B hold the same weight)
          for (int ch = 0; ch < 3; ++ch) {
            hl[half * 8 + ch * 2 + p] = static_cast<int16_t>(wt >> 11);
            hl[16 + half * 8 + ch * 2 + p] = static_cast<int16_t>(wt & 0x7FF);
          }
        }
    }
}

// The lanes of chunks a column may have (RGB: 32 taps, downscaling by up to about 15, 4000 x 3000
// to 256; grey: 128 taps).
constexpr int kMaxChunkLanes = 128;

// Kernel k's output columns [left, left + n) laid out for rows of w pixels of c (1 or 3) channels,
// whose first is the image's column `origin`, for vectors of `lanes` lanes: each column's first tap
// moved left where the chunks would run past the row's end (its weights moved with it). False when
// that does not fit (a row shorter than the chunks, or more taps than kMaxChunkLanes allows).
bool horizontal_taps(const Kernel& k, int w, int c, int origin, int left, int n, int lanes, HorizontalTaps& t) {
  const int per_chunk = c == 3 ? lanes / 4 : lanes, spread = c == 3 ? 4 : 1;
  const int taps = *std::max_element(k.count.begin() + left, k.count.begin() + left + n);
  t.lanes = lanes;
  t.chunks = (taps + per_chunk - 1) / per_chunk;
  t.pairs = 0;
#if defined(__x86_64__)
  if (lanes == 8 && c == 3) {  // pairs of two-pixel chunks: the pmaddwd layout (pair_weights below)
    t.pairs = (taps + 3) / 4;
    t.chunks = 2 * t.pairs;
  }
#endif
  t.step = per_chunk * c;
  const int span = t.chunks * per_chunk;  // pixels the chunks cover
  if (t.chunks * lanes > kMaxChunkLanes || w < span) return false;
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
  if (t.pairs) pair_weights(t, n);
  return true;
}

// An RGB chunk's L / 4 pixels spread to four lanes a pixel (the fourth repeats the third).
template <int L>
TC_SIMD_INLINE Bytes<L> spread_rgb(Bytes<L> b) {
  if constexpr (L == 8) {
    return __builtin_shufflevector(b, b, 0, 1, 2, 2, 3, 4, 5, 5);
  } else {
    static_assert(L == 4, "RGB chunks of 1, 2 or 4 pixels");
    return __builtin_shufflevector(b, b, 0, 1, 2, 2);
  }
}

// The L samples at p, each to an int32 lane.
template <int L>
TC_SIMD_INLINE void widen_samples(const uint8_t* p, Ints<L>& v) {
  if constexpr (L == 8) {
    widen8_samples(p, v);
  } else {
    widen<L>(load_bytes<L>(p), v);
  }
}

// The RGB chunk at p, its L / 4 pixels spread to four int32 lanes each.
template <int L>
TC_SIMD_INLINE void widen_rgb(const uint8_t* p, Ints<L>& v) {
  widen<L>(spread_rgb<L>(load_bytes<L>(p)), v);
}

// One output column's accumulator of its RGB chunks: G of them, or t.chunks where G is 0.
template <int L, int G>
TC_SIMD_INLINE void rgb_column(const uint8_t* line, const HorizontalTaps& t, int x, Ints<L>& acc) {
  const uint8_t* src = line + t.offset[x];
  const int32_t* wv = &t.weights[static_cast<std::size_t>(x) * t.chunks * L];
  const int chunks = G ? G : t.chunks;
  acc = Ints<L>{};
  for (int g = 0; g < chunks; ++g) {
    Ints<L> v, w;
    widen_rgb<L>(src + g * t.step, v);
    load_ints<L>(w, wv + g * L);
    acc += v * w;
  }
}

// L / 4 columns' accumulators (a[p]: lanes 4q + ch, chunk pixel q's channel ch) folded into one
// vector whose lanes 4p + ch are column p's channel ch: each column's pixels summed.
template <int L>
TC_SIMD_INLINE void fold_columns(const Ints<L>* a, Ints<L>& sum) {
  if constexpr (L == 8) {
    sum = __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 8, 9, 10, 11) +
          __builtin_shufflevector(a[0], a[1], 4, 5, 6, 7, 12, 13, 14, 15);
  } else {
    sum = a[0];
  }
}

// L / 4 columns' bytes (lanes 4p + ch) stored as 3 bytes a column.
template <int L>
TC_SIMD_INLINE void store_rgb(Bytes<L> v, uint8_t* o, bool whole) {
  if constexpr (L == 8) {
    v = __builtin_shufflevector(v, v, 0, 1, 2, 4, 5, 6, 7, 7);
  }
  if (whole) {
    std::memcpy(o, &v, L);  // one store; the next columns' store replaces the bytes past these
  } else {
    std::memcpy(o, &v, L / 4 * 3);
  }
}

// Four RGB columns' sums of 8 lanes (pair_column's: two partial sums of the column, four lanes
// each, R, G, B and a spare) stored as 12 bytes: columns 0 and 2 folded into one vector and 1 and
// 3 into another, so that one rounding and clipping serves two columns; then each value is a byte,
// the second vector's moved to the second byte of its lane, and one in-lane byte shuffle lays out
// columns 0, 1 in the low half and 2, 3 in the high half, stored as 6 bytes each. (GCC's conversion
// of int32 lanes to bytes takes twice the instructions.) `whole`: 2 bytes past the 12 may be
// written (the next columns' store replaces them).
TC_SIMD_INLINE void store_rgb4(const Ints<8>& a0, const Ints<8>& a1, const Ints<8>& a2, const Ints<8>& a3, uint8_t* o,
                               bool whole) {
  Ints<8> c02 = __builtin_shufflevector(a0, a2, 0, 1, 2, 3, 8, 9, 10, 11) +
                __builtin_shufflevector(a0, a2, 4, 5, 6, 7, 12, 13, 14, 15);
  Ints<8> c13 = __builtin_shufflevector(a1, a3, 0, 1, 2, 3, 8, 9, 10, 11) +
                __builtin_shufflevector(a1, a3, 4, 5, 6, 7, 12, 13, 14, 15);
  c02 = (c02 + kHalf) >> kResampleBits;
  c13 = (c13 + kHalf) >> kResampleBits;
  c02 = c02 < 0 ? 0 : c02 > 255 ? 255 : c02;
  c13 = c13 < 0 ? 0 : c13 > 255 ? 255 : c13;
  const Ints<8> both = c02 | (c13 << 8);
  Bytes32 b;
  std::memcpy(&b, &both, sizeof b);
  b = __builtin_shufflevector(b, b, 0, 4, 8, 1, 5, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 20, 24, 17, 21, 25, 16, 16, 16,
                              16, 16, 16, 16, 16, 16, 16);
  uint64_t lo, hi;
  std::memcpy(&lo, &b, 8);
  std::memcpy(&hi, reinterpret_cast<const uint8_t*>(&b) + 16, 8);
  std::memcpy(o, &lo, 8);
  if (whole) {
    std::memcpy(o + 6, &hi, 8);
  } else {
    std::memcpy(o + 6, &hi, 6);
  }
}

// Output columns [0, to) of one RGB row, L / 4 at a time: their accumulators folded together,
// rounded, clipped and stored. (8-lane RGB on x86-64 goes through pair_rows instead.)
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
    for (int g = 0; g < chunks; ++g) {
      Ints<L> v, w;
      widen_samples<L>(src + g * t.step, v);
      load_ints<L>(w, wv + g * L);
      a += v * w;
    }
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

// The first of the n columns whose loads, `reach` bytes from the column's first byte, run past a
// row of `end` bytes (n when none does): the columns before it are safe to load on the image's last row.
TC_SIMD_INLINE int columns_inside(const HorizontalTaps& t, int n, int reach, int end) {
  while (n > 0 && t.offset[n - 1] + reach > end) --n;
  return n;
}

template <int L, int C, int G>
TC_SIMD_INLINE void horizontal_rows(const uint8_t* in, int rows, int w, const HorizontalTaps& t, int n, uint8_t* out,
                                    bool image_end) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* line = in + static_cast<std::ptrdiff_t>(r) * w * C;
    uint8_t* o = out + static_cast<std::ptrdiff_t>(r) * n * C;
    // a chunk reads its L bytes: not past the image's last one
    const int safe = image_end && r == rows - 1 ? columns_inside(t, n, (t.chunks - 1) * t.step + L, w * C) : n;
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

#if defined(__x86_64__)
// 8-lane RGB rows with pmaddwd (AVX2): a column's taps four pixels at a time, one 16-byte load
// spread to 16-bit lanes that pair two pixels' samples (pair_weights' layout) and multiplied by the
// weights' high and low halves, each product pair summed by the instruction. Two pmaddwd cover the
// four pixels two int32 multiplies covered in two chunks, with half the loads and spreads. The sum
// comes out as two partial sums of four lanes (pixels 0, 1 and 2, 3), for store_rgb4. Intrinsics:
// pmaddwd has no vector-extension form, and they need this function's own target (not the
// template chain's).
template <int P>  // the pairs, unrolled; 0: t.pairs, looped
TC_SIMD_8 TC_SIMD_INLINE void pair_column(const uint8_t* src, const int16_t* wv, int pairs, Ints<8>& sum) {
  const __m256i spread = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
                                          6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
  for (int g = 0; g < (P ? P : pairs); ++g) {
    const __m256i px = _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 12 * g))), spread);
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wv + 32 * g))));
    lo = _mm256_add_epi32(
        lo, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wv + 32 * g + 16))));
  }
  const __m256i all = _mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo);
  std::memcpy(&sum, &all, sizeof sum);
}

template <int P>
TC_SIMD_8 void pair_rows(const uint8_t* in, int rows, int w, const HorizontalTaps& t, int n, uint8_t* out,
                         bool image_end) {
  const std::size_t per_column = static_cast<std::size_t>(t.pairs) * 32;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* line = in + static_cast<std::ptrdiff_t>(r) * w * 3;
    uint8_t* o = out + static_cast<std::ptrdiff_t>(r) * n * 3;
    // a pair's load reads 16 bytes: not past the image's last one
    const int safe = image_end && r == rows - 1 ? columns_inside(t, n, (t.pairs - 1) * 12 + 16, w * 3) : n;
    const int* offset = t.offset.data();
    const int16_t* wv = t.pair_weights.data();
    int x = 0;
    for (; x + 4 <= safe; x += 4) {
      Ints<8> a0, a1, a2, a3;
      pair_column<P>(line + offset[x], wv + x * per_column, t.pairs, a0);
      pair_column<P>(line + offset[x + 1], wv + (x + 1) * per_column, t.pairs, a1);
      pair_column<P>(line + offset[x + 2], wv + (x + 2) * per_column, t.pairs, a2);
      pair_column<P>(line + offset[x + 3], wv + (x + 3) * per_column, t.pairs, a3);
      store_rgb4(a0, a1, a2, a3, o + x * 3, x + 8 <= n);
    }
    horizontal_exact(line, t, 3, x, n, o);
  }
}

TC_SIMD_8 void horizontal_rgb_pairs(const uint8_t* in, int rows, int w, const HorizontalTaps& t, int n, uint8_t* out,
                                    bool image_end) {
  switch (t.pairs) {
    case 1:
      return pair_rows<1>(in, rows, w, t, n, out, image_end);
    case 2:
      return pair_rows<2>(in, rows, w, t, n, out, image_end);
    case 3:
      return pair_rows<3>(in, rows, w, t, n, out, image_end);
    case 4:
      return pair_rows<4>(in, rows, w, t, n, out, image_end);
    default:
      return pair_rows<0>(in, rows, w, t, n, out, image_end);
  }
}
#endif

TC_SIMD_8 void horizontal_8(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n, uint8_t* out,
                            bool image_end) {
#if defined(__x86_64__)
  if (c == 3) return horizontal_rgb_pairs(in, rows, w, t, n, out, image_end);  // horizontal_taps laid out pairs
  horizontal_chunks<8, 1>(in, rows, w, t, n, out, image_end);
#else
  horizontal_lanes<8>(in, rows, w, c, t, n, out, image_end);
#endif
}
void horizontal_4(const uint8_t* in, int rows, int w, int c, const HorizontalTaps& t, int n, uint8_t* out,
                  bool image_end) {
  horizontal_lanes<4>(in, rows, w, c, t, n, out, image_end);
}

}  // namespace

// The horizontal pass of the window: output columns [left, left + n) of kernel k from rows of w
// pixels beginning at the image's column `origin`, chunked where horizontal_taps lays them out, else
// resample_pass over the window's columns.
void horizontal_window(const uint8_t* in, int rows, int w, int origin, int c, const Kernel& k, int left, int n,
                       uint8_t* out, bool image_end, HorizontalTaps& taps) {
  // At most 8 lanes: on AVX-512 CPUs the AVX2 build of this pass ran in two thirds of the time its
  // 16-lane build took (RGB: pmaddwd on 8 lanes against int32 multiplies on 16; grey: each column's
  // sum folded across half the lanes). Measured on an AMD EPYC with AVX-512, 2026-12-03.
  const int lanes = std::min(simd_lanes(), 8);
  if ((c == 1 || c == 3) && horizontal_taps(k, w, c, origin, left, n, lanes, taps)) {
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

namespace {

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
        Ints<L> v;
        widen_samples<L>(p, v);
        acc += v * wt[i];
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

}  // namespace

// The vertical pass for output rows [top, top + n) of kernel `k` (resample.h), at this CPU's width.
void vertical_window(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out) {
  const int lanes = simd_lanes();
  if (lanes == 16) return vertical_16(in, row0, len, k, top, n, out);
  if (lanes == 8) return vertical_8(in, row0, len, k, top, n, out);
  vertical_4(in, row0, len, k, top, n, out);
}

}  // namespace traincache::io::image
