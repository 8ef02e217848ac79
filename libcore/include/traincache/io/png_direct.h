// PNG photos decoded without libspng: 8-bit grey or RGB, not interlaced, the kind nearly every PNG
// photo is. libspng inflates with zlib and undoes the rows' filters a byte at a time (Paeth, the
// filter PNG encoders pick for photos, in Debian's build); this path inflates the whole image with
// libdeflate and undoes Paeth a pixel at a time with SIMD, about twice as fast for the same bytes.
// Anything else, or anything amiss, is left to libspng, which decodes it or names what is wrong:
// the path takes only files libspng decodes to exactly these samples. docs/design.md, "PNG photos".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "traincache/base/default_init.h"

namespace traincache::io::png_direct {

/// Whether this build has the path (libdeflate found at build time).
bool available();

/// The image of a PNG of the kind above, well formed (every chunk's CRC right, the zlib stream
/// whole and exactly the image's size, every row's filter known): its samples (height rows of
/// width x channels bytes) into `samples`, its size and channels (1 or 3) set; false for any other
/// file (`samples` may have been written to, nothing else set). `max_pixels` bounds width x height (a larger image:
/// false, so that the caller's own check names it).
bool decode(const unsigned char* bytes, std::size_t size, int64_t max_pixels, ByteBuffer& samples, int& width,
            int& height, int& channels);

}  // namespace traincache::io::png_direct
