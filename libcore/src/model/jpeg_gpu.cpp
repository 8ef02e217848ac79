// nvJPEG's decoder, built into libtraincache_cuda.so (model/cuda_module.h): the engines module
// reaches it through make_jpeg_decoder, tc_cuda_jpeg_decoder here.
#include "traincache/model/jpeg_gpu.h"

#include "cuda_module.h"
#include "traincache/base/error.h"
#include "traincache/base/timing.h"
#include "traincache/model/runtime.h"
#include "traincache_nvjpeg_config.h"

#if TRAINCACHE_WITH_NVJPEG
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>
#endif

namespace traincache::model {

#if TRAINCACHE_WITH_NVJPEG

// One backend's library handle, with a state for batches and one for single files. Outside the
// anonymous namespace: NvjpegDecoder::Impl holds two, and a unity build includes this file.
struct NvjpegLane {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t batched = nullptr, single = nullptr;
  int batch = 0;  // the batch size `batched` was initialised for; 0: not (or after a failure)

  ~NvjpegLane() {
    if (single) nvjpegJpegStateDestroy(single);
    if (batched) nvjpegJpegStateDestroy(batched);
    if (handle) nvjpegDestroy(handle);
  }
};

namespace {

void ok(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS)
    throw Error(Exit::unavailable, "nvJPEG", std::string(what) + " failed (status " + std::to_string(int(s)) + ")");
}

const unsigned char* bytes(std::string_view f) { return reinterpret_cast<const unsigned char*>(f.data()); }

// A lane on `backend`, or null where the device or the library lacks it. Interpolated chroma
// upsampling where the backend takes the flag.
std::unique_ptr<NvjpegLane> make_lane(nvjpegBackend_t backend) {
  auto lane = std::make_unique<NvjpegLane>();
  if (nvjpegCreateEx(backend, nullptr, nullptr, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, &lane->handle) !=
          NVJPEG_STATUS_SUCCESS &&
      nvjpegCreateEx(backend, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &lane->handle) != NVJPEG_STATUS_SUCCESS) {
    lane->handle = nullptr;
    return nullptr;
  }
  if (nvjpegJpegStateCreate(lane->handle, &lane->batched) != NVJPEG_STATUS_SUCCESS ||
      nvjpegJpegStateCreate(lane->handle, &lane->single) != NVJPEG_STATUS_SUCCESS)
    return nullptr;
  return lane;
}

// Planar RGB destinations in `t` ([3, H, W], contiguous).
nvjpegImage_t planes(const torch::Tensor& t) {
  nvjpegImage_t img{};
  const int64_t h = t.size(1), w = t.size(2);
  for (int c = 0; c < 3; ++c) {
    img.channel[c] = t.data_ptr<uint8_t>() + c * h * w;
    img.pitch[c] = static_cast<std::size_t>(w);
  }
  return img;
}

}  // namespace

class NvjpegDecoder final : public JpegDecoder {
 public:
  explicit NvjpegDecoder(torch::Device device);
  std::vector<torch::Tensor> decode(const std::vector<std::string_view>& files) override;
  std::string backends() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct NvjpegDecoder::Impl {
  torch::Device device;
  std::unique_ptr<NvjpegLane> hardware, hybrid;
  nvjpegJpegStream_t parsed = nullptr;  // on the hardware lane: which files it takes

  explicit Impl(torch::Device d) : device(d) {}
  ~Impl() {
    if (parsed) nvjpegJpegStreamDestroy(parsed);
  }

  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(device.index()).stream(); }

  // Whether the hardware decoder takes `f`: its header is enough (what nvjpegDecodeBatchedSupported
  // reads: the coding process, the subsampling, the size); a whole-stream parse would walk every byte
  // of every file on the thread that feeds the GPU.
  bool hardware_takes(std::string_view f) const {
    int unsupported = 1;  // nvJPEG sets 0 when the decoder takes the file
    return hardware &&
           nvjpegJpegStreamParseHeader(hardware->handle, bytes(f), f.size(), parsed) == NVJPEG_STATUS_SUCCESS &&
           nvjpegDecodeBatchedSupported(hardware->handle, parsed, &unsupported) == NVJPEG_STATUS_SUCCESS &&
           unsupported == 0;
  }

  // Decodes files[i] for i in `which` into out[i] as one batch on `lane`; a batch that fails is
  // decoded file by file on the hybrid lane, and a file that fails alone is left undefined.
  void run(NvjpegLane& lane, const std::vector<std::size_t>& which, const std::vector<std::string_view>& files,
           std::vector<torch::Tensor>& out) {
    if (which.empty()) return;
    const int n = static_cast<int>(which.size());
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> lengths;
    std::vector<nvjpegImage_t> dest;
    for (std::size_t i : which) {
      data.push_back(bytes(files[i]));
      lengths.push_back(files[i].size());
      dest.push_back(planes(out[i]));
    }
    if (lane.batch != n) {
      ok(nvjpegDecodeBatchedInitialize(lane.handle, lane.batched, n, 1, NVJPEG_OUTPUT_RGB), "starting a batch");
      lane.batch = n;
    }
    if (nvjpegDecodeBatched(lane.handle, lane.batched, data.data(), lengths.data(), dest.data(), stream()) ==
        NVJPEG_STATUS_SUCCESS)
      return;
    lane.batch = 0;  // a failed batch state is initialised again before its next use
    for (std::size_t k = 0; k < which.size(); ++k)
      if (nvjpegDecode(hybrid->handle, hybrid->single, data[k], lengths[k], NVJPEG_OUTPUT_RGB, &dest[k], stream()) !=
          NVJPEG_STATUS_SUCCESS)
        out[which[k]] = torch::Tensor();
  }
};

NvjpegDecoder::NvjpegDecoder(torch::Device device) {
  if (!device.is_cuda()) throw Error(Exit::unavailable, "nvJPEG", "decodes on a CUDA device, not " + device.str());
  impl_ = std::make_unique<Impl>(device);
  impl_->hybrid = make_lane(NVJPEG_BACKEND_DEFAULT);
  if (!impl_->hybrid) throw Error(Exit::unavailable, "nvJPEG", "cannot start on " + device.str());
  impl_->hardware = make_lane(NVJPEG_BACKEND_HARDWARE);
  if (impl_->hardware && nvjpegJpegStreamCreate(impl_->hardware->handle, &impl_->parsed) != NVJPEG_STATUS_SUCCESS)
    impl_->hardware.reset();
}

std::vector<torch::Tensor> NvjpegDecoder::decode(const std::vector<std::string_view>& files) {
  Impl& im = *impl_;
  std::vector<torch::Tensor> out(files.size());
  std::vector<std::size_t> on_hardware, on_hybrid;
  for (std::size_t i = 0; i < files.size(); ++i) {
    int components = 0;
    nvjpegChromaSubsampling_t css{};
    int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
    if (nvjpegGetImageInfo(im.hybrid->handle, bytes(files[i]), files[i].size(), &components, &css, widths, heights) !=
            NVJPEG_STATUS_SUCCESS ||
        (components != 1 && components != 3) || widths[0] <= 0 || heights[0] <= 0)
      continue;
    out[i] = torch::empty({3, heights[0], widths[0]}, torch::TensorOptions(torch::kByte).device(im.device));
    (im.hardware_takes(files[i]) ? on_hardware : on_hybrid).push_back(i);
  }
  // The hardware batch first: its engines then decode while this thread works through the hybrid
  // lane's files (progressive ones among them), whose Huffman decoding runs here on the CPU.
  auto t = Clock::now();
  if (im.hardware) im.run(*im.hardware, on_hardware, files, out);
  account_.hardware_seconds += seconds_since(t);
  t = Clock::now();
  im.run(*im.hybrid, on_hybrid, files, out);
  account_.hybrid_seconds += seconds_since(t);
  account_.hardware_files += static_cast<int64_t>(on_hardware.size());
  return out;
}

std::string NvjpegDecoder::backends() const { return impl_->hardware ? "hardware+hybrid" : "hybrid"; }

#endif

}  // namespace traincache::model

void tc_cuda_jpeg_decoder(const c10::Device* device, traincache::model::JpegDecoder** out,
                          traincache::ModuleFailure* failure) {
  traincache::guarded(failure, [&] {
#if TRAINCACHE_WITH_NVJPEG
    *out = new traincache::model::NvjpegDecoder(*device);
#else
    traincache::model::require_nvjpeg();  // throws: this build has none
#endif
  });
}
