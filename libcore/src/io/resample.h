// PIL's antialiased bilinear resampling in its fixed point (kResampleBits): the kernels, the
// scalar pass resize_bilinear uses, and the windowed passes of the reader (image.cpp's
// resize_window), whose vector code is built per vector width (simd_clones.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace traincache::io::image {

// PIL's antialiased bilinear weights for resampling `in` samples to `out`: for output i, the
// inputs first[i] .. first[i] + count[i] - 1 with weights in 22-bit fixed point.
struct Kernel {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> fixed;
};

Kernel bilinear_kernel(int in, int out);

// The kernel of an axis resized from `in` to `out` (one thread's last few kept); null when it is
// not resized.
std::shared_ptr<const Kernel> axis_kernel(int in, int out);

// One resampling pass along an axis: `lines` lines (`in_line` samples apart) of samples `in_step`
// apart, each `c` channels, into lines of k.first.size() samples, in PIL's fixed point.
void resample_pass(const uint8_t* in, uint8_t* out, const Kernel& k, int lines, int c, std::ptrdiff_t in_line,
                   std::ptrdiff_t in_step, std::ptrdiff_t out_line, std::ptrdiff_t out_step);

// How the horizontal pass reads a row, for vectors of `lanes` lanes: each output column's taps in
// `chunks` loads of `lanes` bytes, `step` bytes apart, from byte offset[x]; the `lanes` weights of
// column x's chunk g begin at weights[(x * chunks + g) * lanes]. An RGB chunk is lanes / 4 pixels
// (the load's last lanes / 4 bytes unused), spread to four lanes each (the fourth weighted 0); a
// grey chunk is `lanes` samples.
struct HorizontalTaps {
  int lanes = 0, chunks = 0, step = 0;
  std::vector<int> offset;
  std::vector<int32_t> weights;
  // RGB with 8 lanes on x86-64: the same taps in chunks of four pixels (pairs), each weight split
  // into 16-bit halves for pmaddwd (resample.cpp, horizontal_rgb_pairs); `pairs` 0 otherwise.
  int pairs = 0;
  std::vector<int16_t> pair_weights;
};

// The horizontal pass of the window: output columns [left, left + n) of kernel k from rows of w
// pixels beginning at the image's column `origin`, chunked where horizontal_taps lays them out, else
// resample_pass over the window's columns.
void horizontal_window(const uint8_t* in, int rows, int w, int origin, int c, const Kernel& k, int left, int n,
                       uint8_t* out, bool image_end, HorizontalTaps& taps);

// The vertical pass for output rows [top, top + n) of kernel `k`, row by row: each output row is
// the weighted sum of whole input rows (`in` holds input rows from `row0`, `len` samples each), so
// every load is contiguous, L samples at a time.
void vertical_window(const uint8_t* in, int row0, int len, const Kernel& k, int top, int n, uint8_t* out);

}  // namespace traincache::io::image
