// A faster entropy decoder for progressive JPEGs' Huffman-coded scans, put in place of libjpeg's
// (jdphuff.c) for one jpeg_start_decompress. libjpeg-turbo's progressive decoder reads correction
// bits one coefficient at a time and keeps state to resume after a suspended input; with the whole
// file in memory neither is needed. The coefficients are defined by the file (ITU-T T.81, G.1.2),
// so any correct decoder gives libjpeg's, and libjpeg's own inverse DCT, upsampling and colour
// conversion run on them as before: the samples are libjpeg's. Whatever this decoder does not take on
// (a marker inside a scan's data, a code no table has, a coefficient past the band: damaged files)
// makes it give up, and the caller decodes the file again with libjpeg's own decoder, so a damaged
// file meets exactly libjpeg's handling. Built with libjpeg's internal header (jpegint.h, which
// Debian's libjpeg62-turbo-dev installs), whose structures are those of the library it comes with,
// where CMake found libjpeg-turbo 2.1 to 3.x (TRAINCACHE_JPEG_SCANS); elsewhere attach() does
// nothing and libjpeg decodes every scan.
#pragma once

#include <memory>

struct jpeg_decompress_struct;

namespace traincache::io::image {

/// One thread's progressive scan decoder, reused from file to file.
class ProgressiveScans {
 public:
  ProgressiveScans();
  ~ProgressiveScans();
  ProgressiveScans(const ProgressiveScans&) = delete;
  ProgressiveScans& operator=(const ProgressiveScans&) = delete;

  /// Has the next jpeg_start_decompress on `c` (after jpeg_read_header) decode its scans with this
  /// decoder, where `c` is a progressive Huffman-coded file; leaves any other file to libjpeg.
  void attach(jpeg_decompress_struct& c);
  /// Leaves `c`'s next decode to libjpeg's own decoder.
  static void detach(jpeg_decompress_struct& c);
  /// Whether the last attached decode gave up (libjpeg's error_exit was called to unwind it): the
  /// caller decodes the file again, detached.
  bool gave_up() const;
  /// How many scans this decoder decoded in the last attached decode.
  int scans() const;
  /// Whether this build has the decoder (else attach() leaves every file to libjpeg).
  static bool built();

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace traincache::io::image
