#include "traincache/encoder.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "traincache/error.h"

namespace traincache::encode {

namespace {
std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
  return line;
}

// c10::Error's what() carries a C++ stack trace; its message without it is more useful.
std::string torch_message(const std::string& msg) {
  // TorchScript errors start with "The following operation failed in the TorchScript
  // interpreter." and end with the Python-level exception; keep the last meaningful line.
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < msg.size()) {
    std::size_t nl = msg.find('\n', pos);
    if (nl == std::string::npos) nl = msg.size();
    std::string l = msg.substr(pos, nl - pos);
    if (!l.empty() && l.find_first_not_of(' ') != std::string::npos) lines.push_back(l);
    pos = nl + 1;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->find("Error:") != std::string::npos) return first_line(*it);
  return lines.empty() ? "unknown error" : first_line(lines.front());
}
}  // namespace

std::string torch_error_message(const std::string& what) { return torch_message(what); }

torch::jit::IValue call_forward(torch::jit::Module& m, std::vector<torch::jit::IValue> args,
                                const std::string& subject) {
  try {
    return m.forward(std::move(args));
  } catch (const c10::Error& e) {
    throw Error(Exit::data, subject, "rejected the input: " + torch_message(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(Exit::data, subject, "rejected the input: " + torch_message(e.what()));
  }
}

torch::jit::Module load_module(const std::string& path, torch::Device device) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(Exit::no_input, path, errno_text(errno));
  try {
    return torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw Error(Exit::data, path, "cannot load TorchScript module: " + torch_message(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(Exit::data, path, "cannot load TorchScript module: " + torch_message(e.what()));
  }
}

torch::Device parse_device(const std::string& spec, const std::string& option) {
  std::optional<torch::Device> dev;
  try {
    dev = torch::Device(spec);
  } catch (const c10::Error&) {
    throw Error(Exit::usage, option, "expected cpu or cuda[:N], got '" + spec + "'");
  }
  const std::string subject = option.back() == '=' ? option + spec : option + " " + spec;
  if (dev->is_cuda()) {
    if (!torch::cuda::is_available())
      throw Error(Exit::unavailable, subject,
                  "CUDA is not available (this LibTorch has no CUDA support or no GPU is visible)");
    if (dev->has_index() && dev->index() >= static_cast<int>(torch::cuda::device_count()))
      throw Error(Exit::unavailable, subject, "only " + std::to_string(torch::cuda::device_count()) + " CUDA devices");
  } else if (!dev->is_cpu()) {
    throw Error(Exit::usage, option, "expected cpu or cuda[:N], got '" + spec + "'");
  }
  return *dev;
}

void configure_threads(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (at::get_num_threads() != n) at::set_num_threads(n);
}

void require_numeric_input(const h5::DatasetInfo& info, const std::string& file) {
  if (info.dtype == DType::string || info.dtype == DType::other)
    throw Error(Exit::data, file,
                "dataset '" + info.name + "' has dtype " + dtype_name(info.dtype) +
                    "; an encoder input must be integer or floating point");
  if (info.shape.empty())
    throw Error(Exit::data, file, "dataset '" + info.name + "' is a scalar; expected [rows, ...]");
}

torch::Tensor read_input_rows(hid_t dset, const h5::DatasetInfo& info, int64_t start, int64_t count, double scale) {
  std::vector<int64_t> shape = info.shape;
  shape[0] = count;
  const std::string what = info.name;
  require_memory("reading " + std::to_string(count) + " rows of '" + what + "'",
                 static_cast<uint64_t>(count) * static_cast<uint64_t>(std::max<int64_t>(1, info.row_elements())),
                 info.dtype == DType::u8 ? 5 : 8);
  if (info.dtype == DType::u8) {
    // Converted here with a plain loop rather than a torch op: reader threads must not start
    // OpenMP teams of their own next to the encoder's.
    std::vector<uint8_t> raw(static_cast<std::size_t>(count * info.row_elements()));
    h5::read_rows(dset, what, start, count, H5T_NATIVE_UINT8, raw.data());
    auto t = torch::empty(shape, torch::kFloat32);
    float* out = t.data_ptr<float>();
    const float s = static_cast<float>(scale);
    for (std::size_t i = 0; i < raw.size(); ++i) out[i] = raw[i] * s;
    return t;
  }
  if (is_integer(info.dtype)) {
    auto t = torch::empty(shape, torch::kInt64);
    h5::read_rows(dset, what, start, count, H5T_NATIVE_INT64, t.data_ptr());
    return t;
  }
  if (is_float(info.dtype)) {
    auto t = torch::empty(shape, torch::kFloat32);
    h5::read_rows(dset, what, start, count, H5T_NATIVE_FLOAT, t.data_ptr());
    return t;
  }
  throw Error(Exit::data, what, std::string("cannot feed dtype ") + dtype_name(info.dtype));
}

torch::Tensor read_slab_rows(const shm::Slab& slab, int64_t start, int64_t count, double scale) {
  auto si = slab.info();
  if (si.layout != shm::Layout::fixed)
    throw Error(Exit::data, si.name, "an encoder input slab must have a fixed layout");
  std::vector<int64_t> shape{count};
  for (auto d : si.dims) shape.push_back(static_cast<int64_t>(d));
  static const std::map<DType, torch::Dtype> kTypes = {{DType::u8, torch::kUInt8},    {DType::i8, torch::kInt8},
                                                       {DType::i16, torch::kInt16},   {DType::i32, torch::kInt32},
                                                       {DType::i64, torch::kInt64},   {DType::f16, torch::kFloat16},
                                                       {DType::f32, torch::kFloat32}, {DType::f64, torch::kFloat64}};
  auto it = kTypes.find(si.dtype);
  if (it == kTypes.end())
    throw Error(Exit::data, si.name,
                std::string("slab dtype ") + dtype_name(si.dtype) + " cannot be fed to an encoder");
  require_memory("reading " + std::to_string(count) + " items of slab " + si.name, static_cast<uint64_t>(count),
                 si.item_bytes * (si.dtype == DType::u8 ? 5 : 1));
  auto raw = torch::empty(shape, it->second);
  auto* dst = static_cast<char*>(raw.data_ptr());
  for (int64_t i = 0; i < count; ++i) {
    auto v = slab.view(static_cast<uint64_t>(start + i));
    if (!v)
      throw Error(Exit::data, si.name,
                  "index " + std::to_string(start + i) + " is not cached (shm-cache fill it first)");
    std::memcpy(dst + i * si.item_bytes, v.data, v.bytes);
  }
  if (si.dtype == DType::u8) {
    auto t = torch::empty(shape, torch::kFloat32);
    const auto* in = raw.data_ptr<uint8_t>();
    float* out = t.data_ptr<float>();
    const float s = static_cast<float>(scale);
    for (int64_t i = 0; i < raw.numel(); ++i) out[i] = in[i] * s;
    return t;
  }
  return is_integer(si.dtype) ? raw.to(torch::kInt64) : raw.to(torch::kFloat32);
}

Encoder::Encoder(std::string name, std::string path, torch::Device device, std::string output)
    : name_(std::move(name)), path_(std::move(path)), output_(std::move(output)), device_(device) {
  plain_ = load_module(path_, device_);
  plain_.eval();
  for (auto p : plain_.parameters()) p.set_requires_grad(false);
}

torch::Tensor Encoder::run(torch::jit::Module& m, const std::vector<torch::Tensor>& inputs) {
  c10::InferenceMode guard;
  std::vector<torch::jit::IValue> args;
  for (const auto& t : inputs) args.emplace_back(t.to(device_));
  torch::jit::IValue out = call_forward(m, std::move(args), "encoder '" + name_ + "'");
  if (!output_.empty()) {
    bool numeric = output_.find_first_not_of("0123456789") == std::string::npos;
    if (out.isTuple() || out.isList()) {
      if (!numeric)
        throw Error(Exit::data, "encoder '" + name_ + "'",
                    "returns a tuple/list; --output must be an index, got '" + output_ + "'");
      auto elems = out.isTuple() ? out.toTupleRef().elements().vec() : out.toListRef().vec();
      // Digits only, but possibly more than fit 64 bits: parsed without throwing.
      std::size_t i = 0;
      bool fits = output_.size() <= 18;
      for (char c : output_) i = fits ? i * 10 + static_cast<std::size_t>(c - '0') : i;
      if (!fits || i >= elems.size())
        throw Error(
            Exit::data, "encoder '" + name_ + "'",
            "--output " + output_ + " out of range: the output has " + std::to_string(elems.size()) + " elements");
      out = elems[i];
    } else if (out.isGenericDict()) {
      auto dict = out.toGenericDict();
      auto it = dict.find(torch::jit::IValue(output_));
      if (it == dict.end()) throw Error(Exit::data, "encoder '" + name_ + "'", "output has no key '" + output_ + "'");
      out = it->value();
    } else {
      throw Error(Exit::data, "encoder '" + name_ + "'",
                  "--output " + output_ + " given but the output is a single value");
    }
  }
  if (!out.isTensor()) {
    std::string kind = out.isTuple()         ? "a tuple"
                       : out.isGenericDict() ? "a dict"
                       : out.isList()        ? "a list"
                                             : "not a tensor";
    throw Error(Exit::data, "encoder '" + name_ + "'",
                "output is " + kind + "; select a tensor with --output KEY|INDEX");
  }
  return out.toTensor();
}

torch::Tensor Encoder::forward(const std::vector<torch::Tensor>& inputs) {
  return run(optimized_ ? *optimized_ : plain_, inputs);
}

OptimizeOutcome Encoder::try_optimize(const std::vector<torch::Tensor>& sample, double rtol) {
  OptimizeOutcome r;
  torch::Tensor want = run(plain_, sample);
  if (!torch::isfinite(want).all().item<bool>()) {
    r.plain_nonfinite = true;
    r.why_not = "the plain module's output holds NaN or Inf";
    return r;
  }
  try {
    torch::jit::Module frozen = torch::jit::freeze(plain_);
    torch::jit::Module opt = torch::jit::optimize_for_inference(frozen);
    torch::Tensor got = run(opt, sample);
    if (got.sizes() != want.sizes()) {
      r.why_not = "optimised output has another shape";
      return r;
    }
    c10::InferenceMode guard;
    auto w = want.to(torch::kFloat64), g = got.to(torch::kFloat64);
    r.max_abs_diff = (w - g).abs().max().item<double>();
    double scale = std::max(1.0, w.abs().max().item<double>());
    if (!(r.max_abs_diff <= rtol * scale)) {
      r.why_not = "optimised output differs from the plain module by " + std::to_string(r.max_abs_diff);
      return r;
    }
    optimized_ = std::move(opt);
    r.used = true;
  } catch (const Error& e) {
    r.why_not = e.what();
  } catch (const c10::Error& e) {
    r.why_not = "optimisation failed: " + torch_message(e.what_without_backtrace());
  } catch (const std::exception& e) {
    r.why_not = "optimisation failed: " + torch_message(e.what());
  }
  return r;
}

}  // namespace traincache::encode
