// Decoding only part of a JPEG: the rows and columns a resize-and-crop window reads, through
// libjpeg-turbo's libjpeg API (jpeg_skip_scanlines, jpeg_crop_scanline), which TurboJPEG's 2.x API
// that io/image.cpp decodes whole images with does not offer. Built where Debian's libjpeg-dev is
// installed (TRAINCACHE_HAVE_LIBJPEG); elsewhere images are decoded whole.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "traincache/io/image.h"

namespace traincache::io::image {

/// What decode_jpeg_part() decodes: the image at 1/reduce of its size (1, 2, 4 or 8: libjpeg's DCT
/// scaling, as PIL's draft() asks for it), and of that, a region holding rows [top, top + rows) and
/// columns [left, left + cols).
struct Region {
  int reduce = 1;
  int top = 0, left = 0, rows = 0, cols = 0;
};

/// Decodes the JPEG in bytes into `img` (1 or 3 channels, as the file has them: grey, else RGB):
/// only a part holding `r`'s region, to the same samples a whole decode at that scale gives there;
/// img.part says which part `samples` holds, img.height and width are the reduced image's, and
/// img.file_height and file_width the file's where it is reduced. Every row is still
/// entropy-decoded, so a truncated or corrupt file fails as a whole decode does (Error(data, what,
/// ...) with libjpeg's message). False, with `img` untouched, where this build has no libjpeg.
bool decode_jpeg_part(const unsigned char* bytes, std::size_t size, const Region& r, const std::string& what,
                      Image& img);

/// {height, width} of an h x w JPEG decoded at 1/reduce of its size (libjpeg rounds up).
std::pair<int, int> reduced_size(int h, int w, int reduce);

}  // namespace traincache::io::image
