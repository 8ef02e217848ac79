// Decoding only part of a JPEG: the rows and columns a resize-and-crop window reads, through
// libjpeg-turbo's libjpeg API (jpeg_skip_scanlines, jpeg_crop_scanline), which TurboJPEG's 2.x API
// that io/image.cpp decodes whole images with does not offer. Built where Debian's libjpeg-dev is
// installed (TRAINCACHE_HAVE_LIBJPEG); elsewhere images are decoded whole.
#pragma once

#include <cstddef>
#include <string>

#include "traincache/io/image.h"

namespace traincache::io::image {

/// Decodes the JPEG in bytes into `img` (1 or 3 channels, as the file has them: grey, else RGB),
/// only a region holding rows [top, top + rows) and columns [left, left + cols) of it, to the same
/// samples a whole decode gives there; img.part says which region `samples` holds. Every row is
/// still entropy-decoded, so a truncated or corrupt file fails as a whole decode does (Error(data,
/// what, ...) with libjpeg's message). False, with `img` untouched, where this build has no libjpeg.
bool decode_jpeg_part(const unsigned char* bytes, std::size_t size, int top, int left, int rows, int cols,
                      const std::string& what, Image& img);

}  // namespace traincache::io::image
