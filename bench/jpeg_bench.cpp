// jpeg-bench: JPEG files decoded and preprocessed on a CUDA device (nvJPEG, then model::ImagePrep)
// against the CPU path (io::image: libjpeg-turbo and PIL's resampling, to the bit), side by side on
// the same files held in memory: the device's rows/s, one CPU thread's, and how far the device's
// 8-bit samples are from the CPU's. With --device cpu the decoding is the CPU's and ImagePrep runs
// on the CPU: its samples must equal the CPU path's (the check of the comparison itself). Prints
// one JSON document.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "traincache/base/error.h"
#include "traincache/base/report.h"
#include "traincache/base/version.h"
#include "traincache/cli/cli.h"
#include "traincache/io/image.h"
#include "traincache/model/encode.h"
#include "traincache/model/image_prep.h"
#include "traincache/model/jpeg_gpu.h"
#include "traincache/model/runtime.h"

using namespace traincache;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  cli::CommonOptions common;
  std::string dir, device = "cuda:0", resize = "256", crop = "224";
  int64_t files = 2048, batch = 256, compare = 256;
  int repeats = 3;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A JPEG file read into memory, and its path (for messages).
struct JpegFile {
  std::string path, bytes;
};

// The first `n` JPEG files under `dir` (recursively, in path order), read into memory.
std::vector<JpegFile> read_jpegs(const std::string& dir, int64_t n) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(Exit::no_input, dir, "not a folder");
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path());
  }
  if (paths.empty()) throw Error(Exit::no_input, dir, "holds no .jpg or .jpeg files");
  std::sort(paths.begin(), paths.end());
  paths.resize(std::min<std::size_t>(paths.size(), static_cast<std::size_t>(n)));
  std::vector<JpegFile> out;
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    out.push_back({p.string(), std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>())});
  }
  return out;
}

// `f` decoded on the CPU; a file it cannot decode -> Error naming it.
io::image::Image cpu_decode(const JpegFile& f, const io::image::Spec& spec) {
  return io::image::decode(reinterpret_cast<const unsigned char*>(f.bytes.data()), f.bytes.size(), spec.channels,
                           spec.exif_transpose, f.path);
}

// The CPU path's samples of one file, uint8 [C, H, W].
torch::Tensor cpu_samples(const JpegFile& f, const io::image::Spec& spec) {
  const auto img = cpu_decode(f, spec);
  auto t = torch::empty(io::image::output_shape(spec, img.height, img.width), torch::kByte);
  io::image::preprocess_pixels(img, spec, t.data_ptr<uint8_t>());
  return t;
}

// The device path over `files` in batches: each file's samples on the device (the CPU path's for
// a file the decoder leaves); `left` counts those.
struct DevicePath {
  io::image::Spec spec;
  torch::Device device;
  std::unique_ptr<model::JpegDecoder> decoder;  // none on the CPU: the CPU's decoding, then ImagePrep
  model::ImagePrep prep;

  DevicePath(const io::image::Spec& s, torch::Device d) : spec(s), device(d), prep(s, d) {
    if (d.is_cuda()) decoder = model::make_jpeg_decoder(d);
  }

  std::vector<torch::Tensor> batch(const std::vector<JpegFile>& files, std::size_t a, std::size_t b, int64_t& left) {
    std::vector<torch::Tensor> decoded(b - a), out;
    std::vector<std::string_view> bytes;
    for (std::size_t i = a; i < b; ++i) bytes.emplace_back(files[i].bytes);
    if (decoder) decoded = decoder->decode(bytes);
    for (std::size_t i = a; i < b; ++i) {
      torch::Tensor& d = decoded[i - a];
      if (!d.defined() && decoder) {
        ++left;
        out.push_back(cpu_samples(files[i], spec).to(device));
        continue;
      }
      if (!d.defined()) {  // the CPU's decoding, full size, as a decoder would hand it over
        io::image::Spec rgb;
        const auto img = cpu_decode(files[i], rgb);
        d = torch::from_blob(const_cast<uint8_t*>(img.samples.data()), {img.height, img.width, 3}, torch::kByte)
                .permute({2, 0, 1})
                .clone(at::MemoryFormat::Contiguous);  // a copy: `img` is freed below, even for h or w of 1
      }
      // EXIF orientations are not read here: the spec leaves them (jpeg-bench has no --exif).
      out.push_back(prep(d, 1));
    }
    return out;
  }
};

nlohmann::ordered_json agreement(const std::vector<torch::Tensor>& got, const std::vector<JpegFile>& files,
                                 const io::image::Spec& spec) {
  int64_t max = 0, samples = 0, same = 0;
  double sum = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto want = cpu_samples(files[i], spec).to(torch::kInt);
    const auto diff = (got[i].cpu().to(torch::kInt) - want).abs();
    max = std::max<int64_t>(max, diff.max().item<int64_t>());
    sum += diff.sum().item<double>();
    samples += diff.numel();
    same += diff.eq(0).sum().item<int64_t>();
  }
  return {{"files", got.size()},
          {"max_abs_diff", max},
          {"mean_abs_diff", samples ? sum / samples : 0.0},
          {"identical_fraction", samples ? double(same) / samples : 1.0}};
}

int run(const Options& o) {
  model::configure_threads(o.common.threads);
  const torch::Device device = model::parse_device(o.device);
  io::image::Spec spec;
  if (!o.resize.empty() && o.resize != "none") io::image::parse_resize(o.resize, spec);
  if (!o.crop.empty() && o.crop != "none") io::image::parse_center_crop(o.crop, spec);
  const auto files = read_jpegs(o.dir, o.files);
  DevicePath path(spec, device);
  auto t = Clock::now();
  for (const auto& f : files) cpu_samples(f, spec);
  const double cpu_rate = files.size() / seconds_since(t);
  double device_rate = 0;
  int64_t left = 0;
  std::vector<torch::Tensor> first;
  for (int r = 0; r < o.repeats; ++r) {
    left = 0;
    t = Clock::now();
    for (std::size_t a = 0; a < files.size(); a += static_cast<std::size_t>(o.batch)) {
      const std::size_t b = std::min(files.size(), a + static_cast<std::size_t>(o.batch));
      auto rows = path.batch(files, a, b, left);
      if (a == 0 && r == 0) first = std::move(rows);
    }
    if (device.is_cuda()) torch::cuda::synchronize();
    device_rate = std::max(device_rate, files.size() / seconds_since(t));
  }
  first.resize(std::min<std::size_t>(first.size(), static_cast<std::size_t>(o.compare)));
  nlohmann::ordered_json j{{"schema", "jpeg-bench/1"},
                           {"version", version_banner("jpeg-bench")},
                           {"device", device.str()},
                           {"decoder", path.decoder ? "nvjpeg " + path.decoder->backends() : "cpu"},
                           {"files", files.size()},
                           {"batch", o.batch},
                           {"resize", o.resize},
                           {"center_crop", o.crop},
                           {"device_rows_per_second", device_rate},
                           {"cpu_one_thread_rows_per_second", cpu_rate},
                           {"left_to_cpu", left},
                           {"agreement", agreement(first, files, spec)}};
  report::print_json(j);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"JPEG decoding and preprocessing on a GPU (nvJPEG) against the CPU path, on the same files.",
               "jpeg-bench"};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::threads_only, model::runtime_info);
  app.add_option("dir", o.dir, "Folder of JPEG files (searched recursively)")->required();
  app.add_option("--device", o.device, "cuda[:N], or cpu (the CPU's decoding, then the device path's preprocessing)")
      ->capture_default_str();
  app.add_option("--files", o.files, "At most this many files, in path order")
      ->capture_default_str()
      ->check(cli::positive_integer());
  app.add_option("--batch", o.batch, "Files per decoder call")->capture_default_str()->check(cli::positive_integer());
  app.add_option("--resize", o.resize, "As cache-fill's --resize (none: no resize)")->capture_default_str();
  app.add_option("--center-crop", o.crop, "As cache-fill's --center-crop (none: no crop)")->capture_default_str();
  app.add_option("--compare", o.compare, "Files of the first batch compared with the CPU path")->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timed passes over the files (the best is kept)")
      ->capture_default_str()
      ->check(cli::positive_integer());
  app.footer(
      "EXIT STATUS\n  0 measured; 64 usage; 65 a file the CPU cannot decode; 66 no folder or no JPEG files in it;\n"
      "  69 no CUDA device, or this build has no nvJPEG.");
  return cli::end_process(cli::run_tool("jpeg-bench", app, argc, argv, [&] { return run(o); }));
}
