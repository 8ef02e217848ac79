#include "traincache/model/encode.h"

#include <sys/stat.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/model/attention.h"
#include "traincache/model/onednn_linear.h"
#include "traincache/model/precision_torch.h"

// Declared in torch/csrc/jit/codegen/fuser/interface.h, which Debian's libtorch-dev does not ship;
// LibTorch 1.13 to 2.x export it with this signature.
namespace torch::jit {
TORCH_API void overrideCanFuseOnCPU(bool value);
TORCH_API void setTensorExprFuserEnabled(bool val);  // torch/csrc/jit/passes/tensorexpr_fuser.h
}  // namespace torch::jit

namespace traincache::model {

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

namespace {
// The keys of an encoder's dict output, for messages: "'pooled', 'tokens'".
std::string dict_keys(const c10::impl::GenericDict& dict) {
  std::string keys;
  for (const auto& kv : dict) {
    const std::string k = kv.key().isString() ? "'" + kv.key().toStringRef() + "'" : kv.key().tagKind();
    keys += (keys.empty() ? "" : ", ") + k;
  }
  return keys.empty() ? "none" : keys;
}
}  // namespace

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return true;
  const std::string what = e.what();
  // The CPU allocator's words vary with the version: "not enough memory", "can't allocate memory".
  return what.find("DefaultCPUAllocator: not enough memory") != std::string::npos ||
         what.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         what.find("CUDA out of memory") != std::string::npos;
}

Error out_of_memory_error(const std::string& subject, const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  const std::string line = torch_message(c10e ? c10e->what_without_backtrace() : e.what());
  return Error(Exit::unavailable, subject, "out of memory: " + line + " (a smaller --batch-size needs less)");
}

namespace {

// numpy's names ("float32", "int64"), which the docs and the other tools use.
std::string scalar_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return "float32";
    case torch::kDouble:
      return "float64";
    case torch::kHalf:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kLong:
      return "int64";
    case torch::kInt:
      return "int32";
    case torch::kShort:
      return "int16";
    case torch::kByte:
      return "uint8";
    case torch::kChar:
      return "int8";
    case torch::kBool:
      return "bool";
    default:
      return c10::toString(t);
  }
}

}  // namespace

std::string describe_inputs(const std::vector<torch::jit::IValue>& args) {
  std::string out;
  for (const auto& a : args) {
    std::string one = a.tagKind();
    if (a.isTensor()) {
      const auto& t = a.toTensor();
      one = "[";
      for (int64_t d = 0; d < t.dim(); ++d) one += (d ? ", " : "") + std::to_string(t.size(d));
      one += "] " + scalar_name(t.scalar_type());
    }
    out += (out.empty() ? "" : " and ") + one;
  }
  return out.empty() ? "no input" : out;
}

namespace {

// What a model's refusal most likely means, from what it was fed and what it said: "" when
// nothing stands out.
std::string likely_cause(const std::vector<torch::jit::IValue>& args, const std::string& why) {
  auto says = [&](const char* s) { return why.find(s) != std::string::npos; };
  bool ids = false, images = false;
  for (const auto& a : args)
    if (a.isTensor()) {
      ids = ids || a.toTensor().scalar_type() == torch::kLong;
      images = images || (a.toTensor().is_floating_point() && a.toTensor().dim() >= 4);
    }
  if (says("forward() is missing value for argument") || says("expected at most") || says("Expected at most"))
    return " (the model takes another number of inputs than it was fed: docs/models.md says what it must accept)";
  if (ids && (says("conv") || says("mat1 and mat2") || says("scalar type Float") || says("Input type")))
    return " (token ids fed to a model that takes images or vectors?)";
  if (images && (says("indices") || says("Embedding") || says("scalar type Long") || says("scalar types Long")))
    return " (images fed to a model that takes token ids: a text model?)";
  if (says("Expected all tensors to be on the same device"))
    return " (a module traced on one device keeps the tensors it made there: trace it on the device it runs on, "
           "docs/models.md)";
  if (images && (says("channels") || says("shape") || says("size") || says("mat1 and mat2") || says("dimension")))
    return " (the images' shape comes from --channels, --resize and --center-crop: give the ones the model was "
           "trained with)";
  return "";
}

}  // namespace

torch::jit::IValue call_forward(torch::jit::Module& m, std::vector<torch::jit::IValue> args,
                                const std::string& subject) {
  auto refused = [&](const std::string& why) {
    return Error(Exit::data, subject,
                 "rejected the input (" + describe_inputs(args) + "): " + why + likely_cause(args, why));
  };
  try {
    return m.forward(args);
  } catch (const c10::Error& e) {
    if (is_out_of_memory(e)) throw out_of_memory_error(subject, e);
    throw refused(torch_message(e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    throw out_of_memory_error(subject, e);
  } catch (const std::exception& e) {  // the TorchScript interpreter's own exceptions
    if (is_out_of_memory(e)) throw out_of_memory_error(subject, e);
    throw refused(torch_message(e.what()));
  }
}

namespace {

// TorchScript's CPU fuser compiles fused kernels with LLVM at run time when LibTorch was built with
// it (Debian 13's 2.6 is): minutes of compilation on the second or third call of a module, for
// kernels that gain little over a frozen, optimised module. PyTorch leaves CPU fusion off by
// default; so do the tools. GPU fusion is untouched.
void disable_cpu_fusion() {
  static std::once_flag once;
  std::call_once(once, [] { torch::jit::overrideCanFuseOnCPU(false); });
}

// The first sentence of LibTorch's words on a file it cannot load: 2.x goes on with advice of its own
// ("This is an internal miniz error. If you are seeing this error, ...") after the cause.
std::string load_failure(const std::string& what) {
  std::string msg = torch_message(what);
  const auto end = msg.find(". ");
  return end == std::string::npos ? msg : msg.substr(0, end);
}

}  // namespace

torch::jit::Module load_module(const std::string& path, torch::Device device) {
  disable_cpu_fusion();
  ::close(files::open_input(path));  // missing or not a regular file (a FIFO would block the load): 66
  try {
    return torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw Error(Exit::data, path, "cannot load TorchScript module: " + load_failure(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(Exit::data, path, "cannot load TorchScript module: " + load_failure(e.what()));
  }
}

// Measured on an H200 with MiniLM's batches by tokens (60 shapes, fresh processes): in fp16 the
// fuser's kernels cost 20-30 ms and cuDNN's attention plan 30-40 ms for each new shape, 4.3 s in all
// against 0.95 s with both off; float32 2.0 -> 1.7 s. PyTorch's other attention kernels (memory-
// efficient, flash) take any shape without a plan.
void for_varying_shapes(torch::Device device) {
  if (!device.is_cuda()) return;
  torch::jit::setTensorExprFuserEnabled(false);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  at::globalContext().setSDPUseCuDNN(false);
#endif
}

// The same measurement: freeze + optimize_for_inference made MiniLM's batches 7% slower in float32
// and 37% slower under fp16 autocast on CUDA (measured, not explained).
bool optimise_for(torch::Device device, bool varying_shapes) { return !(device.is_cuda() && varying_shapes); }

void to_float_type(torch::jit::Module& m, torch::ScalarType type) {
  torch::NoGradGuard no_grad;
  auto convert = [type](torch::Tensor t) {
    if (t.defined() && t.is_floating_point() && t.scalar_type() != type) t.set_data(t.to(type));
  };
  for (const auto& p : m.parameters()) convert(p);
  for (const auto& b : m.buffers()) convert(b);
}

void require_device_index(const torch::Device& device, const std::string& subject) {
  if (!device.is_cuda() || !device.has_index()) return;
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (device.index() >= count)
    throw Error(Exit::unavailable, subject,
                "no CUDA device " + std::to_string(device.index()) + ": this machine has " + std::to_string(count));
}

torch::Device parse_device(const std::string& spec, const std::string& option) {
  parse_device_spec(spec, option);  // the grammar the tools check before they load LibTorch
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
    require_device_index(*dev, subject);
  }
  return *dev;
}

DeviceWarmup::DeviceWarmup(const torch::Device& device) {
  if (!device.is_cuda()) return;
  thread_ = std::thread([device] {
    try {
      c10::DeviceGuard guard(device);
      const auto on = torch::TensorOptions().device(device);
      auto image = torch::conv2d(torch::ones({1, 3, 8, 8}, on), torch::ones({4, 3, 3, 3}, on));  // cuDNN
      auto product = torch::matmul(torch::ones({8, 8}, on), torch::ones({8, 8}, on));            // cuBLAS
      auto host = torch::empty({2}, torch::TensorOptions().pinned_memory(true));
      host.copy_(torch::stack({image.sum(), product.sum()}));  // waits for the device
    } catch (const std::exception&) {
    }
  });
}

DeviceWarmup::~DeviceWarmup() {
  if (thread_.joinable()) thread_.join();
}

void configure_threads(int threads) {
  const int n = intra_op_threads(threads);
  if (at::get_num_threads() != n) at::set_num_threads(n);
}

namespace {

// Element-wise conversion with a plain loop: reader threads must not start OpenMP teams of their
// own next to the encoder's, which a torch op would.
template <class From, class To>
void convert(const void* in, To* out, std::size_t n, To scale = To(1)) {
  const From* src = static_cast<const From*>(in);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<To>(src[i]) * scale;
}

void to_float32(DType t, const void* in, float* out, std::size_t n) {
  if (t == DType::f64) return convert<double>(in, out, n);
  if (t == DType::f16) return convert<c10::Half>(in, out, n);
  throw Error(Exit::internal, "", std::string("no float32 conversion from ") + dtype_name(t));
}

}  // namespace

namespace {

// Batch buffers, recycled. A batch of photos is a few hundred MB (256 x 3 x 224 x 224 floats:
// 154 MB); malloc maps an allocation that large afresh each time and the kernel zeroes every page
// again at its first touch, a tenth of a photo fill's CPU time. Freed batches of 1 MB or more are kept
// (at most kKept, a reader's prefetch depth and the batch being encoded) for the next of their size.
class BatchBuffers : public std::enable_shared_from_this<BatchBuffers> {
 public:
  static constexpr std::size_t kMin = std::size_t{1} << 20;
  static constexpr std::size_t kKept = 4;

  static BatchBuffers& instance() {
    static const std::shared_ptr<BatchBuffers> pool = std::make_shared<BatchBuffers>();
    return *pool;
  }

  ~BatchBuffers() {
    for (const auto& [bytes, p] : free_) std::free(p);
  }

  torch::Tensor empty(const std::vector<int64_t>& shape, torch::Dtype dtype) {
    const auto options = torch::TensorOptions(dtype);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const std::size_t bytes = static_cast<std::size_t>(n) * c10::elementSize(dtype);
    if (bytes < kMin) return torch::empty(shape, options);
    void* p = take(bytes);
    if (!p) p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    std::weak_ptr<BatchBuffers> pool = weak_from_this();
    return torch::from_blob(
        p, shape,
        [pool, bytes](void* q) {
          if (auto live = pool.lock()) return live->keep(q, bytes);
          std::free(q);
        },
        options);
  }

 private:
  void* take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->first == bytes) {
        void* p = it->second;
        free_.erase(it);
        return p;
      }
    return nullptr;
  }

  void keep(void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace_back(bytes, p);
    if (free_.size() > kKept) {  // the oldest goes
      std::free(free_.front().second);
      free_.erase(free_.begin());
    }
  }

  std::mutex mutex_;
  std::vector<std::pair<std::size_t, void*>> free_;
};

// Rows of `col` read by `fill` (count rows into a buffer of the column's layout), converted.
torch::Tensor convert_rows(const io::source::Column& col, int64_t count, double scale,
                           const std::function<void(void*)>& fill) {
  const auto& ci = col.info();
  io::source::require_numeric_input(ci, col.path());
  std::vector<int64_t> shape = ci.shape;
  shape[0] = count;
  const std::size_t n = static_cast<std::size_t>(count * ci.row_elements());
  require_memory("reading " + std::to_string(count) + " rows of '" + ci.name + "'", std::max<uint64_t>(1, n),
                 dtype_size(ci.dtype) + (ci.dtype == DType::f32 || ci.dtype == DType::i64 ? 0 : 8));
  const bool integer = is_integer(ci.dtype);
  auto t = BatchBuffers::instance().empty(shape, converted_type(ci.dtype));
  if (ci.dtype == DType::i64 || ci.dtype == DType::f32) {  // already the model's type: read in place
    fill(t.data_ptr());
    return t;
  }
  std::vector<char> raw(n * dtype_size(ci.dtype));
  fill(raw.data());
  if (ci.dtype == DType::u8)
    convert<uint8_t>(raw.data(), t.data_ptr<float>(), n, static_cast<float>(scale));
  else if (integer)
    to_int64(ci.dtype, raw.data(), t.data_ptr<int64_t>(), n);
  else
    to_float32(ci.dtype, raw.data(), t.data_ptr<float>(), n);
  return t;
}

}  // namespace

torch::Dtype converted_type(DType t) { return is_integer(t) && t != DType::u8 ? torch::kInt64 : torch::kFloat32; }

torch::Tensor read_column_rows(const io::source::Column& col, int64_t start, int64_t count, double scale) {
  return convert_rows(col, count, scale, [&](void* out) { col.read(start, count, out); });
}

torch::Tensor read_column_rows(const io::source::Column& col, const std::vector<int64_t>& rows, double scale) {
  return convert_rows(col, static_cast<int64_t>(rows.size()), scale, [&](void* out) { col.read_rows(rows, out); });
}

torch::Tensor read_column_bytes(const io::source::Column& col, int64_t start, int64_t count, bool pin) {
  std::vector<int64_t> shape = col.info().shape;
  shape[0] = count;
  require_memory("reading " + std::to_string(count) + " rows of '" + col.info().name + "'",
                 std::max<uint64_t>(1, static_cast<uint64_t>(count * col.info().row_elements())), 1);
  torch::Tensor t = pin ? torch::empty(shape, torch::TensorOptions(torch::kByte).pinned_memory(true))
                        : BatchBuffers::instance().empty(shape, torch::kByte);
  if (col.preprocess())
    col.read_pixels(start, count, t.data_ptr<uint8_t>());
  else
    col.read(start, count, t.data_ptr());
  return t;
}

Encoder::Encoder(std::string name, std::string path, torch::Device device, std::string output)
    : name_(std::move(name)), path_(std::move(path)), output_(std::move(output)), device_(device) {
  plain_ = load_module(path_, device_);
  plain_.eval();
  for (auto p : plain_.parameters()) p.set_requires_grad(false);
  arity_ = forward_arity(plain_);
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
      if (it == dict.end())
        throw Error(Exit::data, "encoder '" + name_ + "'",
                    "output has no key '" + output_ + "' (its keys: " + dict_keys(dict) + ")");
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
    const std::string keys = out.isGenericDict() ? " (its keys: " + dict_keys(out.toGenericDict()) + ")" : "";
    throw Error(Exit::data, "encoder '" + name_ + "'",
                "output is " + kind + keys + "; select a tensor with --output KEY|INDEX");
  }
  return out.toTensor();
}

std::vector<torch::Tensor> token_tensors(const text::TokenBatch& b) {
  std::vector<torch::Tensor> out;
  for (const auto* v : {&b.input_ids, &b.attention_mask, &b.token_type_ids})
    out.push_back(torch::from_blob(const_cast<int64_t*>(v->data()), {b.rows, b.length}, torch::kInt64).clone());
  return out;
}

void trim_padding(torch::Tensor* ts, std::size_t n, const torch::Tensor& mask) {
  const int64_t longest = std::max<int64_t>(1, mask.sum(1).max().item<int64_t>());
  if (longest >= mask.size(1)) return;
  for (std::size_t k = 0; k < n; ++k) ts[k] = ts[k].slice(1, 0, longest);
}

std::vector<torch::Tensor> slice_rows(const std::vector<torch::Tensor>& ts, int64_t a, int64_t b) {
  if (ts.empty() || (a == 0 && b == ts.front().size(0))) return ts;
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.slice(0, a, b));
  return out;
}

std::size_t forward_arity(const torch::jit::Module& m) {
  const auto& args = m.get_method("forward").function().getSchema().arguments();
  return args.empty() ? 0 : args.size() - 1;
}

std::size_t text_tensors(std::size_t arity, std::size_t features, std::size_t texts, const std::string& subject) {
  if (texts == 0) return 0;
  const std::size_t free = arity > features ? arity - features : 0;
  if (free % texts == 0 && free / texts >= 1 && free / texts <= 3) return free / texts;
  throw Error(Exit::data, subject,
              "forward() takes " + std::to_string(arity) + " tensors, but " + std::to_string(features) +
                  " input(s) and " + std::to_string(texts) +
                  " text field(s) need that many plus 1, 2 or 3 per text field (input_ids[, attention_mask[, "
                  "token_type_ids]])");
}

std::vector<EmbeddingTable> embedding_tables(const torch::jit::Module& m) {
  std::vector<EmbeddingTable> out;
  for (const auto& sub : m.named_modules()) {
    auto type = sub.value.type()->name();
    if (!type || type->name() != "Embedding" || !sub.value.hasattr("weight")) continue;
    auto w = sub.value.attr("weight");
    if (w.isTensor() && w.toTensor().dim() == 2) out.push_back({sub.name, w.toTensor().size(0)});
  }
  return out;
}

namespace {
std::string table_list(const std::vector<EmbeddingTable>& tables) {
  std::string out;
  for (const auto& t : tables) out += (out.empty() ? "" : ", ") + t.name + " (" + std::to_string(t.rows) + " rows)";
  return out.empty() ? "none" : out;
}
}  // namespace

std::optional<EmbeddingTable> token_table(const torch::jit::Module& m, int64_t vocab, const std::string& chosen) {
  if (chosen == "none") return std::nullopt;
  const std::vector<EmbeddingTable> tables = embedding_tables(m);
  if (!chosen.empty()) {
    for (const auto& t : tables)
      if (t.name == chosen) return t;
    throw Error(Exit::usage, "--vocab-table",
                "the encoder has no nn.Embedding '" + chosen + "' (its tables: " + table_list(tables) + ")");
  }
  std::optional<EmbeddingTable> best;
  for (const auto& t : tables)  // the smallest that holds the vocabulary
    if (vocab > 0 && t.rows >= vocab && (!best || t.rows < best->rows)) best = t;
  if (best) return best;
  for (const auto& t : tables)  // else the largest: the table that comes nearest
    if (!best || t.rows > best->rows) best = t;
  return best;
}

std::optional<EmbeddingTable> position_table(const torch::jit::Module& m, const std::string& token_name) {
  for (const auto& t : embedding_tables(m)) {
    std::string leaf = t.name.substr(t.name.rfind('.') == std::string::npos ? 0 : t.name.rfind('.') + 1);
    std::transform(leaf.begin(), leaf.end(), leaf.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t.name != token_name && (leaf.find("pos") != std::string::npos || leaf == "wpe")) return t;
  }
  return std::nullopt;
}

void check_vocabulary(const torch::jit::Module& m, const std::string& subject, const text::Tokenizer& tok,
                      const std::string& tok_path, const std::string& chosen) {
  const int64_t vocab = tok.vocab_size();
  const auto table = token_table(m, vocab, chosen);
  if (!table || table->rows >= vocab) return;
  const std::string which = chosen.empty()
                                ? "no embedding table holds them (its tables: " + table_list(embedding_tables(m)) + ")"
                                : "its table " + table->name + " has " + std::to_string(table->rows) + " rows";
  throw Error(Exit::data, subject,
              tok_path + " has " + std::to_string(vocab) + " tokens but " + which +
                  ": token ids beyond the table cannot be embedded (is this the encoder's tokenizer? --vocab-table "
                  "NAME picks the table, none skips this check)");
}

Int8Conversion Encoder::make_int8(int weight_max) {
  Int8Conversion done;
  int8_ = int8_module(plain_, "encoder '" + name_ + "'", &done, weight_max);
  return done;
}

void Encoder::start_int8(int weight_max) {
  // Freezing copies the module, so this thread may read the plain one meanwhile (as try_optimize's
  // forward does); int8_ is set there and read after get().
  int8_made_ = std::async(std::launch::async, [this, weight_max] { return make_int8(weight_max); });
}

Int8Conversion Encoder::make_int8(const std::vector<torch::Tensor>& sample, torch::Tensor* reference) {
  if (!int8_made_.valid()) start_int8();
  std::future<Int8Conversion> made = std::move(int8_made_);
  {
    torch::jit::GraphOptimizerEnabledGuard unoptimised(false);  // this thread's calls only
    *reference = run(plain_, sample);
  }
  return made.get();
}

torch::Tensor Encoder::forward(const std::vector<torch::Tensor>& inputs) {
  if (precision_ == Precision::fp32) return run(optimized_ ? *optimized_ : plain_, inputs);
  if (precision_ == Precision::int8) {
    if (!int8_) throw Error(Exit::internal, "encoder '" + name_ + "'", "int8 before make_int8");
    return run(*int8_, inputs);
  }
  torch::Tensor out;
  {
    model::Autocast region(precision_, device_);
    out = run(optimized_ ? *optimized_ : plain_, inputs);
  }
  c10::InferenceMode guard;
  return out.is_floating_point() ? out.to(torch::kFloat) : out;
}

bool optimised_within(double optimised_diff, double plain_diff, double scale, double rtol) {
  return optimised_diff <= rtol * scale + 3 * plain_diff;
}

OptimizeOutcome Encoder::try_optimize(const std::vector<torch::Tensor>& sample, double rtol, Precision runs_in) {
  OptimizeOutcome r;
  r.math = model::math_mode(device_);
  const bool tf32 = r.math == std::string("tf32");
  // Freezing and optimising is host work on a copy of the module: it runs beside the plain module's
  // forward passes below, which wait for the device.
  const bool onednn = device_.is_cpu() && runs_in == Precision::fp32;
  std::future<torch::jit::Module> optimised = std::async(std::launch::async, [this, onednn] {
    torch::jit::Module frozen = torch::jit::freeze(plain_);
    if (onednn) {
      onednn_linears(frozen);
      short_attention(*frozen.get_method("forward").graph());
    }
    return torch::jit::optimize_for_inference(frozen);
  });
  torch::Tensor want = run(plain_, sample);  // as the rows will be encoded
  if (!torch::isfinite(want).all().item<bool>()) {
    r.plain_nonfinite = true;
    r.why_not = "the plain module's output holds NaN or Inf";
    return r;
  }
  torch::Tensor reference = want;
  if (tf32) {
    model::FullFloat32 full;
    reference = run(plain_, sample);
  }
  try {
    torch::jit::Module opt = optimised.get();
    torch::Tensor got = run(opt, sample);
    if (got.sizes() != want.sizes()) {
      r.why_not = "optimised output has another shape";
      return r;
    }
    c10::InferenceMode guard;
    auto w = reference.to(torch::kFloat64), g = got.to(torch::kFloat64);
    r.max_abs_diff = (w - g).abs().max().item<double>();
    if (tf32) r.plain_diff = (w - want.to(torch::kFloat64)).abs().max().item<double>();
    double scale = std::max(1.0, w.abs().max().item<double>());
    if (!optimised_within(r.max_abs_diff, r.plain_diff, scale, rtol)) {
      r.why_not = "optimised output differs from the plain module by " + std::to_string(r.max_abs_diff);
      if (tf32)
        r.why_not += " in full float32 terms, beyond three times the plain module's own TF32 difference (" +
                     std::to_string(r.plain_diff) + ")";
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

}  // namespace traincache::model
