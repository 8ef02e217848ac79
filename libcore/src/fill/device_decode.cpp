#include "device_decode.h"

#include <torch/torch.h>

#include "traincache/base/error.h"
#include "traincache/base/timing.h"

namespace traincache::fill {

namespace {

// A row's samples: uint8 zeros of the column's row shape.
torch::Tensor zero_row(const Input& in) {
  return torch::zeros(std::vector<int64_t>(in.info().shape.begin() + 1, in.info().shape.end()), torch::kByte);
}

}  // namespace

EncodedRows read_encoded(const Input& in, int64_t start, int64_t count, bool skip,
                         std::map<int64_t, std::string>& skipped) {
  EncodedRows out;
  out.files.resize(static_cast<std::size_t>(count));
  out.pixels.resize(static_cast<std::size_t>(count));
  for (int64_t r = start; r < start + count; ++r) {
    const auto k = static_cast<std::size_t>(r - start);
    if (!tolerate_input_error([&] { out.files[k] = in.col->read_encoded(r); }, r, skip, skipped)) {
      out.pixels[k] = zero_row(in);
      continue;
    }
    if (out.files[k].jpeg && (out.files[k].baseline || in.device_decodes_every_jpeg)) continue;
    // Decoded here, as the reader threads decode every file with --decode host: not a JPEG, or not
    // a baseline one (progressive: a GPU's hardware decoder leaves it, and nvJPEG's other decoder
    // would run its Huffman decoding on the one thread that feeds the device).
    auto px = zero_row(in);
    tolerate_input_error([&] { in.col->pixels_of(out.files[k], r, px.data_ptr<uint8_t>()); }, r, skip, skipped);
    out.pixels[k] = px;
    out.files[k] = {};
  }
  return out;
}

DeviceDecode::DeviceDecode(const Input& in, torch::Device device)
    : in_(in), device_(device), prep_(*in.col->preprocess(), device) {}

torch::Tensor DeviceDecode::on_host(const io::source::EncodedImage& e, int64_t row, bool skip,
                                    std::map<int64_t, std::string>& skipped) const {
  auto px = zero_row(in_);
  tolerate_input_error([&] { in_.col->pixels_of(e, row, px.data_ptr<uint8_t>()); }, row, skip, skipped);
  return px;
}

std::vector<torch::Tensor> DeviceDecode::decode_files(const EncodedRows& rows) {
  const std::size_t n = rows.files.size();
  std::vector<torch::Tensor> decoded(n);
  if (device_.is_cuda()) {
    if (!nvjpeg_) nvjpeg_ = model::make_jpeg_decoder(device_);
    std::vector<std::string_view> files;
    std::vector<std::size_t> which;
    for (std::size_t k = 0; k < n; ++k)
      if (!rows.pixels[k].defined()) {
        files.emplace_back(rows.files[k].bytes);
        which.push_back(k);
      }
    auto got = nvjpeg_->decode(files);
    for (std::size_t j = 0; j < which.size(); ++j) decoded[which[j]] = std::move(got[j]);
    return decoded;
  }
  for (std::size_t k = 0; k < n; ++k) {  // the CPU's decoding of the whole image, as a decoder hands it over
    if (rows.pixels[k].defined()) continue;
    const auto& e = rows.files[k];
    io::image::Image img;
    try {
      img = io::image::decode(reinterpret_cast<const unsigned char*>(e.bytes.data()), e.bytes.size(),
                              io::image::Channels::rgb, false, "");
    } catch (const Error&) {
      continue;  // on_host says why, naming the file
    }
    // A copy, always: contiguous() of a [3, h, w] view that is contiguous already (h or w of 1)
    // would keep the view of `img`'s buffer, freed at the end of this iteration.
    decoded[k] = torch::from_blob(img.samples.data(), {img.height, img.width, 3}, torch::kByte)
                     .permute({2, 0, 1})
                     .clone(at::MemoryFormat::Contiguous);
  }
  return decoded;
}

torch::Tensor DeviceDecode::operator()(EncodedRows& rows, int64_t start, bool skip,
                                       std::map<int64_t, std::string>& skipped) {
  c10::InferenceMode guard;
  auto t = Clock::now();
  const std::vector<torch::Tensor> decoded = decode_files(rows);
  stats_.decode_seconds += seconds_since(t);
  t = Clock::now();
  std::vector<torch::Tensor> out;
  for (std::size_t k = 0; k < rows.files.size(); ++k) {
    const int64_t row = start + static_cast<int64_t>(k);
    if (rows.pixels[k].defined()) {
      out.push_back(rows.pixels[k].to(device_));
      ++stats_.reader_files;
    } else if (decoded[k].defined()) {
      out.push_back(prep_(decoded[k], rows.files[k].orientation));
      ++stats_.device_files;
    } else {  // left by the device's decoder (CMYK, damaged): as the reader threads would decode it
      out.push_back(on_host(rows.files[k], row, skip, skipped).to(device_));
      ++stats_.host_files;
    }
  }
  auto batch = torch::stack(out);
  stats_.prep_seconds += seconds_since(t);
  return batch;
}

DeviceDecodeStats DeviceDecode::stats() const {
  DeviceDecodeStats s = stats_;
  if (nvjpeg_) {
    const auto& a = nvjpeg_->account();
    s.hardware_files = a.hardware_files;
    s.hardware_seconds = a.hardware_seconds;
    s.hybrid_seconds = a.hybrid_seconds;
  }
  return s;
}

}  // namespace traincache::fill
