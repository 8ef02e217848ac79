// JPEG files decoded on a CUDA device by nvJPEG (issue #47: the CPU's reader threads top out below
// a fast model's forward). Optional: compiled in when CMake finds nvJPEG beside a CUDA LibTorch
// (libcore/CMakeLists.txt). Needs LibTorch: include only from torch translation units.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace traincache::model {

/// Decodes batches of JPEG files on one CUDA device with nvJPEG's batched decoder: on the device's
/// hardware JPEG decoder for the files it takes (where the device has one), nvJPEG's hybrid decoder
/// (Huffman on the CPU or the GPU, the rest on the GPU) for the others. Chroma is upsampled by
/// interpolation, as libjpeg-turbo's "fancy" upsampling that PIL and the CPU path use. The work is
/// queued on the device's current stream. One decoder per thread. The decoder lives in
/// libtraincache_cuda.so (model/cuda_module.h), so that the engines module links no CUDA library:
/// make_jpeg_decoder makes one.
class JpegDecoder {
 public:
  virtual ~JpegDecoder() = default;

  /// Each file's pixels as RGB, uint8 [3, H, W] on the device (a grayscale file's one channel in
  /// all three), in the order given; an undefined tensor for a file nvJPEG does not decode (not a
  /// JPEG, four components, damaged): the caller decodes those on the CPU.
  virtual std::vector<torch::Tensor> decode(const std::vector<std::string_view>& files) = 0;

  /// The decoders in use: "hardware+hybrid" or "hybrid".
  virtual std::string backends() const = 0;

  /// Files given to the hardware decoder so far (the hybrid one took the others), and the host's
  /// seconds in each one's calls (the hybrid decoder's Huffman decoding runs there, on the calling
  /// thread).
  struct Account {
    int64_t hardware_files = 0;
    double hardware_seconds = 0, hybrid_seconds = 0;
  };
  const Account& account() const { return account_; }

 protected:
  Account account_;
};

/// A decoder on `device`. Error(unavailable) when this build has no nvJPEG, `device` is not a CUDA
/// device, or nvJPEG cannot start on it.
std::unique_ptr<JpegDecoder> make_jpeg_decoder(torch::Device device);

}  // namespace traincache::model
