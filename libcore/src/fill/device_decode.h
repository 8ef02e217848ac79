// cache-fill's engine, stage 3's decoding on the device (--decode device): the reader threads read
// an image column's baseline JPEG files as they are (and decode the others), the encode loop decodes them
// on the encoders' device: nvJPEG on a CUDA device, libjpeg-turbo on the CPU (the same bytes as
// the reader threads'); then resize and crop there (model::ImagePrep). docs/code-map.md.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inputs.h"
#include "traincache/fill/fill.h"
#include "traincache/model/image_prep.h"
#include "traincache/model/jpeg_gpu.h"

namespace traincache::fill {

// A batch's rows of an image column as the reader threads hand them to the encode loop: per row,
// a JPEG file to decode there, or its samples (uint8 [C, H, W]) when the reader decoded it (not a
// baseline JPEG: Input::decode_on_device) or skipped it (zeros).
struct EncodedRows {
  std::vector<io::source::EncodedImage> files;
  std::vector<torch::Tensor> pixels;  // defined where the reader made the row
};

// Rows [start, start + count) of `in`. With `skip`, a row that cannot be read or whose header is
// refused becomes zeros, with its reason in `skipped` (by input row).
EncodedRows read_encoded(const Input& in, int64_t start, int64_t count, bool skip,
                         std::map<int64_t, std::string>& skipped);

// The rows' samples on `device`, uint8 [count, C, H, W], as the reader threads would have made
// them (to the bit on the CPU; nvJPEG's decoding on CUDA devices). A JPEG the device's decoder
// leaves is decoded here on the CPU; one that fails there too is an error, or with `skip` zeros
// with its reason in `skipped`. One per column, used by one thread.
class DeviceDecode {
 public:
  DeviceDecode(const Input& in, torch::Device device);
  torch::Tensor operator()(EncodedRows& rows, int64_t start, bool skip, std::map<int64_t, std::string>& skipped);

  // Where this column's files were decoded so far, and the time it took here.
  DeviceDecodeStats stats() const;

 private:
  // Row `row`'s file decoded on the CPU into samples (zeros and a reason in `skipped` with `skip`).
  torch::Tensor on_host(const io::source::EncodedImage& e, int64_t row, bool skip,
                        std::map<int64_t, std::string>& skipped) const;

  // The rows' files decoded on the device's decoder (undefined where it left one).
  std::vector<torch::Tensor> decode_files(const EncodedRows& rows);

  const Input& in_;
  torch::Device device_;
  model::ImagePrep prep_;
  std::unique_ptr<model::JpegDecoder> nvjpeg_;  // on a CUDA device, made on first use
  DeviceDecodeStats stats_;                     // nvJPEG's own account added when asked
};

}  // namespace traincache::fill
