// JPEG files for the GPU decoding tests, written by TurboJPEG (the tests link it).
#pragma once

#include <turbojpeg.h>

#include <string>
#include <vector>

namespace traincache::test {

/// A JPEG of a colour pattern with smooth parts and 8x8 edges, h x w, in `subsamp` (TJSAMP_*).
inline std::string make_jpeg(int h, int w, int subsamp, bool progressive = false, int quality = 90) {
  const bool grey = subsamp == TJSAMP_GRAY;
  const int c = grey ? 1 : 3;
  std::vector<unsigned char> px(static_cast<std::size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        px[static_cast<std::size_t>((y * w + x) * c + k)] =
            static_cast<unsigned char>((x * (3 + k) + y * (5 - k) + ((x / 8 + y / 8) % 2) * 60) % 256);
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, px.data(), w, 0, h, grey ? TJPF_GRAY : TJPF_RGB, &buf, &size, subsamp, quality,
                             progressive ? TJFLAG_PROGRESSIVE : 0);
  std::string out = rc == 0 ? std::string(reinterpret_cast<char*>(buf), size) : std::string();
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

}  // namespace traincache::test
