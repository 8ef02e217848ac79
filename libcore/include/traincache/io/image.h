// Images: decoding JPEG and PNG files (libjpeg-turbo's TurboJPEG, libspng, libexif for the
// orientation tag) and the deterministic preprocessing spec that turns a decoded image into the
// float tensor an encoder reads -- torchvision's Resize, CenterCrop, ToTensor and Normalize on a
// PIL image, computed the way PIL computes them. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/base/default_init.h"

namespace traincache::io::image {

/// The channels an image is converted to after decoding (PIL's convert("RGB") / convert("L")).
enum class Channels { rgb, gray };
const Choices<Channels>& channels_choices();

/// A decoded image: height x width x channels 8-bit samples, interleaved. 16-bit PNGs keep their
/// high byte, as PIL reads them (docs/inputs.md).
struct Image {
  int height = 0, width = 0, channels = 0;
  ByteBuffer samples;  // resize() does not zero it: the decoder writes every byte
  /// The pixels `samples` holds: rows [top, top + rows) and columns [left, left + cols) of the
  /// image, `rows` 0 when it holds all of it. Only decode_for() decodes part of an image, and only
  /// preprocess() and preprocess_pixels() take such a part.
  struct Part {
    int top = 0, left = 0, rows = 0, cols = 0;
  } part;
  bool whole() const { return part.rows == 0; }
  /// The file's size where decode_for() decoded the image reduced (Spec::jpeg_draft: height and
  /// width are then 1/2, 1/4 or 1/8 of it, rounded up); 0 when height and width are the file's.
  /// The resize goes to the size the file's own size gives.
  int file_height = 0, file_width = 0;
  /// {height, width} of the file: what the resize and the output shape are computed from.
  std::pair<int, int> file_size() const {
    return file_height ? std::pair{file_height, file_width} : std::pair{height, width};
  }
};

/// Decodes the JPEG or PNG in bytes[0, size) into `channels`. Alpha is dropped, palettes and
/// grey are expanded (RGB), colour is weighted as PIL's convert("L") does (gray). With
/// `exif_transpose`, the EXIF orientation tag is applied (PIL's ImageOps.exif_transpose).
/// Errors: Error(data, what, why) for an unsupported format or a corrupt or truncated file.
Image decode(const unsigned char* bytes, std::size_t size, Channels channels, bool exif_transpose,
             const std::string& what);

struct Spec;

/// decode() for what `spec` reads of the image: where its resize and center crop read only part of
/// a JPEG (photos under --resize S --center-crop C), only the rows and columns the crop's filter
/// taps reach are decoded (every row still entropy-decoded: a truncated or corrupt file fails as in
/// decode()), with the samples a whole decode gives there. With spec.jpeg_draft a JPEG is decoded
/// at 1/draft_reduction() of its size. `img` is overwritten, its buffer reused.
void decode_for(const unsigned char* bytes, std::size_t size, const Spec& spec, const std::string& what, Image& img);

/// Whether this build decodes only part of a JPEG in decode_for() (libjpeg's headers were there
/// when it was built: Debian's libjpeg-dev); else decode_for() decodes whole images, and a spec
/// with jpeg_draft is refused (validate()).
bool jpeg_parts_built();
/// What decode_for() has done with progressive JPEGs on the calling thread: how many scans the
/// library's own progressive decoder entropy-decoded (in place of libjpeg's, to the same
/// coefficients), and how many files it gave back to libjpeg's decoder (damaged ones: a marker or a
/// code where data should be). Both stay 0 where the build has no such decoder
/// (progressive_scans_built()).
struct ProgressiveCounts {
  long scans = 0, files_given_back = 0;
};
ProgressiveCounts progressive_counts();
/// Whether decode_for() entropy-decodes progressive JPEGs with the library's own decoder (CMake
/// found libjpeg-turbo 2.1 to 3.x's internal header), else with libjpeg's.
bool progressive_scans_built();
/// The vector instructions the image code's widest passes run on, as --version names them:
/// "AVX-512 (16 lanes)", "AVX2 (8 lanes)", "SSE2 (4 lanes)" (x86-64), "128-bit vectors (4 lanes)"
/// (elsewhere); chosen from the CPU at the first image, and held to at most the set that the
/// environment's TRAINCACHE_MAX_CPU_ISA names (avx512, avx2 or sse2, any case; as oneDNN's
/// ONEDNN_MAX_CPU_ISA does), which the text then says. The results are the same bytes on each.
std::string simd_text();
/// Throws Error(Exit::usage) naming TRAINCACHE_MAX_CPU_ISA when it is set to anything but avx512,
/// avx2 or sse2 (or empty); the tools call it before they start work.
void check_max_cpu_isa();
/// The reduction (8, 4, 2, or 1 for none) spec.jpeg_draft decodes an h x w JPEG at: the largest
/// that leaves both sides at least the size the resize makes of them (PIL's draft() asked for that
/// size: min(w // new_w, h // new_h) rounded down to a power of two, at most 8). 1 without
/// jpeg_draft or without a resize that shrinks the image.
int draft_reduction(const Spec& spec, int h, int w);

/// {height, width} of the JPEG or PNG in bytes as decode() would return it, from its header
/// (and its EXIF orientation with `exif_transpose`). Errors as decode().
std::pair<int, int> probe_size(const unsigned char* bytes, std::size_t size, bool exif_transpose,
                               const std::string& what);

/// What a JPEG's markers say without decoding it (jpeg_layout).
struct JpegLayout {
  /// An end-of-image marker follows the first scan's start. libjpeg-turbo refuses a file without
  /// one as truncated ("Premature end of JPEG file", decode()'s error), where GPU decoders (nvJPEG)
  /// decode what is there and leave the rest: --decode device gives such files to the host's
  /// decoder. False too when the markers before the first scan run past the end.
  bool complete = false;
  /// The frame's start-of-frame marker before the first scan (0xC0 baseline, 0xC1 extended
  /// sequential, 0xC2 progressive, ...; 0 for none). GPUs' hardware JPEG decoders take baseline
  /// files only, so --decode device gives the others to the reader threads (docs/cache-fill.md).
  unsigned char frame = 0;

  bool baseline() const { return frame == 0xC0; }
};

/// The layout of the JPEG in bytes (SOI first; a file that is not a JPEG is incomplete, frame 0).
JpegLayout jpeg_layout(const unsigned char* bytes, std::size_t size);

/// jpeg_layout(bytes, size).complete.
bool jpeg_complete(const unsigned char* bytes, std::size_t size);

/// The EXIF orientation (1..8) of the JPEG or PNG in bytes, 1 when it has none.
int exif_orientation(const unsigned char* bytes, std::size_t size);

/// `img` turned as EXIF orientation `o` asks (2..8 flip and rotate; 1 leaves it).
Image apply_orientation(const Image& img, int o);

/// The preprocessing applied to every image before it reaches an encoder. Zero sizes mean "not
/// set". The order is torchvision's: resize, center crop, to [0, 1], normalise.
struct Spec {
  int resize_short = 0;            ///< --resize S: the shorter side to S, aspect kept
  int resize_h = 0, resize_w = 0;  ///< --resize H,W
  int crop_h = 0, crop_w = 0;      ///< --center-crop H,W (padded with zeros when larger)
  Channels channels = Channels::rgb;
  std::vector<double> mean, std;  ///< --normalize; empty = none
  bool exif_transpose = false;
  /// --jpeg-draft: JPEGs decoded at 1/2, 1/4 or 1/8 of their size where the resize still shrinks
  /// them (draft_reduction()), as PIL's Image.draft() does; not exact, so described (and
  /// fingerprinted) apart from the exact preprocessing.
  bool jpeg_draft = false;

  int out_channels() const { return channels == Channels::gray ? 1 : 3; }
  /// The output size is known without decoding (resize H,W or a center crop).
  bool fixed_size() const { return crop_h > 0 || resize_h > 0; }
  /// The spec as (name, value) pairs in pipeline order, values as the flags spell them
  /// ("none" when unset). Stored in caches and compared by fingerprints.
  std::vector<std::pair<std::string, std::string>> describe() const;
};

/// Parsers of the flags' values; Error(usage, flag, why) on bad text.
void parse_resize(const std::string& text, Spec& spec);       // "S" or "H,W"
void parse_center_crop(const std::string& text, Spec& spec);  // "S" or "H,W"
void parse_normalize(const std::string& text, Spec& spec);    // "imagenet" or "M,..:S,..."
/// The spec describe() gave (as stored in a cache); Error(data) when a value does not parse.
Spec spec_from(const std::vector<std::pair<std::string, std::string>>& described);
/// Refuses a spec whose parts do not fit together (normalisation values for other channels).
void validate(const Spec& spec);

/// When the center crop is larger than what the resize gives (along the shorter side of --resize S,
/// or --resize H,W), a note saying that images are padded with zeros to it; "" otherwise (or when
/// it depends on the images' own sizes: no resize).
std::string padding_note(const Spec& spec);

/// [channels, height, width] of the tensor `spec` makes from an image of height h, width w.
std::vector<int64_t> output_shape(const Spec& spec, int h, int w);

/// The size torchvision's Resize gives an h x w image: {new_h, new_w}.
std::pair<int, int> resized_size(const Spec& spec, int h, int w);

/// Applies `spec` to a decoded image, writing output_shape() floats (C, H, W order) to `out`.
void preprocess(const Image& img, const Spec& spec, float* out);

/// The 8-bit samples preprocess() starts from: `img` resized and center cropped (zeros where the
/// crop pads), output_shape() bytes in C, H, W order. preprocess() gives, for each sample v of
/// channel c, v / 255.f and then (that - mean[c]) / std[c] in float32 (spec's values as float),
/// so a caller that converts these samples so elsewhere (on a GPU) gets the same floats.
void preprocess_pixels(const Image& img, const Spec& spec, uint8_t* out);

/// The offsets {top, left} of torchvision's CenterCrop of an h x w image to `spec`'s crop (the
/// resized size when there is none): negative where the crop is larger and pads with zeros.
std::pair<int, int> crop_offsets(const Spec& spec, int h, int w);

/// The fixed point of resize_bilinear's weights: an output sample is
/// clip8((sum of sample x weight + 2^(bits - 1)) >> bits).
constexpr int kResampleBits = 22;  // PIL's for 8-bit images: 32 - 8 - 2

/// resize_bilinear's weights along one axis of `in` samples resampled to `out`, as a dense
/// out x in matrix (row-major) in kResampleBits fixed point: what resize_bilinear computes with.
std::vector<int32_t> bilinear_weights(int in, int out);

/// Resamples an interleaved h x w x c 8-bit image to oh x ow with PIL's antialiased bilinear
/// filter (the support widens with the scale factor), in PIL's fixed point: every pass rounds and
/// clips to 8 bits, so the result is PIL's to the bit.
std::vector<uint8_t> resize_bilinear(const uint8_t* in, int h, int w, int c, int oh, int ow);
inline std::vector<uint8_t> resize_bilinear(const std::vector<uint8_t>& in, int h, int w, int c, int oh, int ow) {
  return resize_bilinear(in.data(), h, w, c, oh, ow);
}

}  // namespace traincache::io::image
