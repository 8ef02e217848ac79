// The engines module's side of nvJPEG's decoder, which lives in libtraincache_cuda.so (cuda_module.h).
#include "cuda_module.h"
#include "traincache/model/jpeg_gpu.h"
#include "traincache/model/runtime.h"

namespace traincache::model {

std::unique_ptr<JpegDecoder> make_jpeg_decoder(torch::Device device) {
  require_nvjpeg();  // nor, without a CUDA LibTorch, is there a CUDA module to ask
  JpegDecoder* decoder = nullptr;
  call_cuda<decltype(tc_cuda_jpeg_decoder)>("tc_cuda_jpeg_decoder", &device, &decoder);
  return std::unique_ptr<JpegDecoder>(decoder);
}

}  // namespace traincache::model
