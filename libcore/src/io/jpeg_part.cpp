// Part of a JPEG decoded through libjpeg's API. libjpeg reports errors by calling error_exit, which
// must not return: it longjmps back into the function that called setjmp, so those functions hold
// no C++ objects with destructors (the buffers are made before, by the caller).
#include "jpeg_part.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "jpeg_scans.h"
#include "traincache/base/error.h"

#ifdef TRAINCACHE_HAVE_LIBJPEG
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#endif

namespace traincache::io::image {

std::pair<int, int> reduced_size(int h, int w, int reduce) {
  return {(h + reduce - 1) / reduce, (w + reduce - 1) / reduce};
}

#ifndef TRAINCACHE_HAVE_LIBJPEG

bool jpeg_parts_built() { return false; }

ProgressiveCounts progressive_counts() { return {}; }

bool progressive_scans_built() { return false; }

bool decode_jpeg_part(const unsigned char*, std::size_t, const Region&, const std::string&, Image&) { return false; }

#else

namespace {

// libjpeg's error manager, with where to jump on an error, its message, and whether a warning said
// the data ended early (libjpeg goes on with grey; decode() refuses such a file as truncated).
struct Failure {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

extern "C" void on_error(j_common_ptr c) {
  auto* f = reinterpret_cast<Failure*>(c->err);
  (*c->err->format_message)(c, f->message);
  std::longjmp(f->jump, 1);
}

extern "C" void on_message(j_common_ptr c, int level) {
  auto* f = reinterpret_cast<Failure*>(c->err);
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF && !f->truncated) {
    f->truncated = true;
    (*c->err->format_message)(c, f->message);
  }
}

// One decompressor per thread, reused from image to image (jpeg_abort_decompress between them),
// with the progressive scan decoder that takes the place of libjpeg's.
struct Decoder {
  jpeg_decompress_struct cinfo{};
  Failure fail{};
  ProgressiveScans scans;
  Decoder() {
    cinfo.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = on_error;
    fail.mgr.emit_message = on_message;
    jpeg_create_decompress(&cinfo);
  }
  ~Decoder() { jpeg_destroy_decompress(&cinfo); }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

// The region to decode, in the image's pixels, and what the decoder made of it.
struct Plan {
  int height, width;         // the image's, at the decode's scale
  int x0, x1, y0, y1;        // wanted: columns [x0, x1), rows [y0, y1) (y0 a row group's first)
  int left, cols;            // decoded: columns [left, left + cols)
  uint8_t* const* row_ptrs;  // the y1 - y0 rows of the caller's buffer
};

bool read_header(Decoder& d, const unsigned char* bytes, std::size_t size) {
  if (setjmp(d.fail.jump)) return false;
  d.fail.truncated = false;
  jpeg_abort_decompress(&d.cinfo);  // after an error between the calls here, if any
  jpeg_mem_src(&d.cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

// The decoder set to give the image at 1/reduce of its size (libjpeg's DCT scaling).
bool scale_output(Decoder& d, int reduce) {
  if (setjmp(d.fail.jump)) return false;
  d.cinfo.scale_num = 1;
  d.cinfo.scale_denom = static_cast<unsigned>(reduce);
  jpeg_calc_output_dimensions(&d.cinfo);
  return true;
}

// Output rows per row group (iMCU row): what jpeg_skip_scanlines skips whole.
int group_rows(const jpeg_decompress_struct& c) {
#if JPEG_LIB_VERSION >= 70
  return c.max_v_samp_factor * c.min_DCT_v_scaled_size;
#else
  return c.max_v_samp_factor * c.min_DCT_scaled_size;
#endif
}

// Starts the decode of plan's columns (libjpeg widens them to its iMCU boundaries: plan's left and
// cols say which it decodes) from row y0 on.
bool start_rows(Decoder& d, Plan& p) {
  jpeg_decompress_struct& c = d.cinfo;
  if (setjmp(d.fail.jump)) return false;
  c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&c);
  JDIMENSION x = static_cast<JDIMENSION>(p.x0), width = static_cast<JDIMENSION>(p.x1 - p.x0);
  if (width < c.output_width) jpeg_crop_scanline(&c, &x, &width);
  p.left = static_cast<int>(x);
  p.cols = static_cast<int>(c.output_width);
  if (p.y0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(p.y0));
  return true;
}

// Decodes rows [y0, y1) into row_ptrs and entropy-decodes the rest, as a whole decode would, to meet
// the errors it would meet (a file cut short below the crop is refused, as PIL refuses it). A file
// of one scan is read to its last row: libjpeg's skip to the end of the image decodes nothing (it
// marks the input ended), so the rows up to the last are skipped (entropy-decoded only) and the
// last is read into `spare`. A file of several scans (progressive) was entropy-decoded whole by
// jpeg_start_decompress, so its skip to the end is enough.
bool read_rows(Decoder& d, const Plan& p, uint8_t* spare) {
  jpeg_decompress_struct& c = d.cinfo;
  if (setjmp(d.fail.jump)) return false;
  while (c.output_scanline < static_cast<JDIMENSION>(p.y1)) {
    const JDIMENSION at = c.output_scanline;
    jpeg_read_scanlines(&c, const_cast<JSAMPARRAY>(p.row_ptrs + (at - p.y0)), static_cast<JDIMENSION>(p.y1) - at);
  }
  if (!jpeg_has_multiple_scans(&c) && c.output_scanline < c.output_height) {
    if (c.output_height - c.output_scanline > 1) jpeg_skip_scanlines(&c, c.output_height - c.output_scanline - 1);
    JSAMPROW last = spare;
    jpeg_read_scanlines(&c, &last, 1);
  }
  if (c.output_scanline < c.output_height) jpeg_skip_scanlines(&c, c.output_height - c.output_scanline);
  jpeg_finish_decompress(&c);
  return true;
}

[[noreturn]] void fail(Decoder& d, const std::string& what) {
  const std::string why = d.fail.message;
  jpeg_abort_decompress(&d.cinfo);
  throw Error(Exit::data, what, "corrupt JPEG: " + why);
}

ProgressiveCounts& counts() {
  thread_local ProgressiveCounts n;
  return n;
}

// Reads the header and starts the decode of r's region, planned into p, with this library's
// progressive scan decoder (`own`) or libjpeg's; false where this library's gave up on the file.
bool start(Decoder& d, const unsigned char* bytes, std::size_t size, const Region& r, const std::string& what, bool own,
           Plan& p) {
  if (!read_header(d, bytes, size)) fail(d, what);
  jpeg_decompress_struct& c = d.cinfo;
  if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK) {
    jpeg_abort_decompress(&c);
    throw Error(Exit::data, what, "CMYK JPEG images are not supported; convert them to RGB");
  }
  if (!scale_output(d, r.reduce)) fail(d, what);
  const int w = static_cast<int>(c.output_width), h = static_cast<int>(c.output_height);
  // A margin of 16 columns each side keeps the wanted ones away from the crop's edges (where the
  // chroma upsampling has no neighbour), and the rows start a row group early, on its boundary.
  const int group = group_rows(c);
  p = Plan{};
  p.height = h;
  p.width = w;
  p.x0 = std::max(0, r.left - 16);
  p.x1 = std::min(w, r.left + r.cols + 16);
  p.y0 = std::max(0, r.top - group) / group * group;
  p.y1 = std::min(h, r.top + r.rows);
  if (own)
    d.scans.attach(c);
  else
    ProgressiveScans::detach(c);
  if (start_rows(d, p)) return true;
  if (own && d.scans.gave_up()) return false;
  fail(d, what);
}

}  // namespace

bool jpeg_parts_built() { return true; }

ProgressiveCounts progressive_counts() { return counts(); }

bool progressive_scans_built() { return ProgressiveScans::built(); }

bool decode_jpeg_part(const unsigned char* bytes, std::size_t size, const Region& r, const std::string& what,
                      Image& img) {
  thread_local Decoder d;
  Plan p{};
  // A file the progressive scan decoder gives up on (a damaged one) is decoded again by libjpeg's.
  if (start(d, bytes, size, r, what, true, p)) {
    counts().scans += d.scans.scans();
  } else {
    ++counts().files_given_back;
    start(d, bytes, size, r, what, false, p);
  }
  jpeg_decompress_struct& c = d.cinfo;
  const int w = p.width, h = p.height;  // c.output_width is now the cropped columns'
  const int channels = c.output_components;
  const std::size_t line = static_cast<std::size_t>(p.cols) * channels;
  resize_for_overwrite(img.samples, static_cast<std::size_t>(p.y1 - p.y0) * line);
  std::vector<uint8_t*> row_ptrs(static_cast<std::size_t>(p.y1 - p.y0));
  for (std::size_t i = 0; i < row_ptrs.size(); ++i) row_ptrs[i] = img.samples.data() + i * line;
  p.row_ptrs = row_ptrs.data();
  thread_local ByteBuffer spare;
  resize_for_overwrite(spare, line);
  if (!read_rows(d, p, spare.data())) fail(d, what);
  if (d.fail.truncated) {
    const std::string why = d.fail.message;
    throw Error(Exit::data, what, "truncated JPEG (" + why + ")");
  }
  img.height = h;
  img.width = w;
  img.channels = channels;
  const bool whole = p.y0 == 0 && p.y1 == h && p.cols == w;
  img.part = whole ? Image::Part{} : Image::Part{p.y0, p.left, p.y1 - p.y0, p.cols};
  img.file_height = r.reduce > 1 ? static_cast<int>(c.image_height) : 0;
  img.file_width = r.reduce > 1 ? static_cast<int>(c.image_width) : 0;
  return true;
}

#endif

}  // namespace traincache::io::image
