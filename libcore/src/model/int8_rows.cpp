#include "traincache/model/int8_rows.h"

#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../io/simd_clones.h"
#include "traincache/model/parallel.h"

#if __has_include(<fbgemm/Fbgemm.h>)
#include <fbgemm/Fbgemm.h>
#define TC_ROW_INT8 1
#else
#define TC_ROW_INT8 0
#endif

namespace traincache::model {

#if TC_ROW_INT8
namespace {

// The input's quantization: 255 steps over [-1, 1], zero at 128, applied as fbgemm's quantizing
// kernel does (the value times 1 / step in float32, rounded to the nearest even, clipped to
// [0, 255]), so that this operator and LibTorch's (int8.cpp's fallback) round every row alike.
constexpr float kStep = 2.0f / 255;
constexpr int32_t kZero = 128;

// One linear layer in the operator's form.
struct RowInt8Part {
  std::shared_ptr<fbgemm::PackBMatrix<int8_t>> packed;
  std::vector<int32_t> zero_sums;  // kZero x each output's weight row sum: what the input's zero adds
  std::vector<float> scales;       // kStep x each output's weight scale, in float32 as fbgemm's output stage
  std::vector<float> bias;         // zeros where the layer has none
  int64_t out = 0;
  // What the graph did next with the layer's output, done here on each thread's rows while they
  // are in its cache (row_int8_gelu, row_int8_norm):
  std::string gelu;                   // "none" or "tanh": LibTorch's GELU of that approximation
  at::Tensor norm_weight, norm_bias;  // defined: a residual added, then LibTorch's layer norm
  double norm_eps = 0;
};

// The layers one call runs on the same input (a transformer's query, key and value): the input's
// rows are quantized once for all of them.
struct RowInt8Weight : torch::CustomClassHolder {
  std::vector<RowInt8Part> parts;
  int64_t in = 0;
  int weight_max = 0;  // each weight row's largest magnitude in int8 steps (precision.h)
};

// Eight float32 lanes: GCC's and Clang's vector extensions, built for each clone's instructions
// (fbgemm needs AVX2, so the baseline clone does not run where the operator does).
typedef float Floats8 __attribute__((vector_size(32)));

// Row x (k values) rounded to 8 bits at its own largest magnitude into q; returns that magnitude
// (1e-30 for a row of zeros; NaN where the row holds a NaN or an infinity, so that its output is
// NaN as LibTorch's operators make it).
TC_SIMD_CLONES float quantize_row(const float* x, int64_t k, uint8_t* q) {
  // Four vectors of each at a time: independent chains, so that the loop runs at the loads' speed,
  // not at the latency of one chain of additions (the order cannot change a largest value, and a
  // sum of zeros and NaNs is NaN in any order).
  constexpr int kChains = 4;
  Floats8 lo[kChains] = {}, hi[kChains] = {}, bad[kChains] = {};  // bad: 0 until a NaN or an infinity
  int64_t j = 0;
  for (; j + 8 * kChains <= k; j += 8 * kChains)
    for (int c = 0; c < kChains; ++c) {
      Floats8 v;
      std::memcpy(&v, x + j + 8 * c, sizeof v);
      lo[c] = v < lo[c] ? v : lo[c];
      hi[c] = v > hi[c] ? v : hi[c];
      bad[c] += v * 0.0f;  // times 0: NaN for a NaN or an infinity
    }
  float largest = 0, nan = 0;
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < 8; ++l) {
      largest = std::max(largest, std::max(-lo[c][l], hi[c][l]));
      nan += bad[c][l];
    }
  for (; j < k; ++j) {
    largest = std::max(largest, std::max(-x[j], x[j]));
    nan += x[j] * 0.0f;
  }
  const float scale = std::max(largest, 1e-30f);
  const float inverse = 1.0f / kStep;
  for (j = 0; j < k; ++j) {
    float v = std::nearbyint((x[j] / scale) * inverse) + kZero;
    v = v > 0.0f ? v : 0.0f;  // NaN to 0: the row's output is NaN through its magnitude
    v = v < 255.0f ? v : 255.0f;
    q[j] = static_cast<uint8_t>(v);
  }
  return nan == 0.0f ? scale : std::nanf("");
}

// The largest magnitude of x (k values): NaN where x holds one, as amax gives it.
TC_SIMD_CLONES float largest_magnitude(const float* x, int64_t k) {
  float most = 0, nan = 0;
  for (int64_t i = 0; i < k; ++i) {
    const float m = std::fabs(x[i]);
    most = m > most ? m : most;
    nan += x[i] * 0.0f;
  }
  return nan == 0.0f ? most : std::nanf("");
}

// Weight row x (k values) in int8 at `by` (1 / its scale): round half to even of x * by in
// float32, clipped to [-128, 127] (NaN to -128, not undefined), into q; returns the row's sum.
TC_SIMD_CLONES int32_t quantize_weight_row(const float* x, int64_t k, float by, int8_t* q) {
  int32_t sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    float v = std::nearbyint(x[i] * by);
    v = v > -128.0f ? (v < 127.0f ? v : 127.0f) : -128.0f;
    q[i] = static_cast<int8_t>(v);
    sum += static_cast<int32_t>(v);
  }
  return sum;
}

// One output row from its int32 sums, in place: bias + (sum - the zero's part) x scale x the row's
// magnitude, in the order LibTorch's kernel and addcmul take.
TC_SIMD_CLONES void finish_row(int32_t* acc, float* out, const RowInt8Part& w, float magnitude) {
  const int32_t* zero = w.zero_sums.data();
  const float* scale = w.scales.data();
  const float* bias = w.bias.data();
  for (int64_t j = 0; j < w.out; ++j) {
    const float y = static_cast<float>(acc[j] - zero[j]) * scale[j];
    out[j] = bias[j] + y * magnitude;
  }
}

// acc (m x n) = q (m x k, bytes) times the packed weight, summed in int32 by fbgemm on this thread.
void gemm(const uint8_t* q, int64_t m, int64_t k, const RowInt8Part& w, int32_t* acc) {
  fbgemm::PackAMatrix<uint8_t> packed_rows(fbgemm::matrix_op_t::NoTranspose, static_cast<int32_t>(m),
                                           static_cast<int32_t>(k), q, static_cast<int32_t>(k));
  fbgemm::DoNothing<int32_t, int32_t> nothing;
  fbgemm::memCopy<> keep(nothing);
  fbgemm::fbgemmPacked(packed_rows, *w.packed, acc, acc, static_cast<uint32_t>(w.out), keep, 0, 1);
}

// Whether fbgemm's kernels on this CPU sum every product of bytes (at most 255) and weights (at
// most weight_max) exactly: its VNNI kernels sum each product in 32 bits; the others (AVX2,
// AVX-512 without VNNI) first add the products in pairs in 16 bits, which saturate at 32,767 (two
// inputs of 250 times weights of 127 gave 32,767, not 63,500), so there the weights must keep
// 255 x weight_max x 2 within it (weight_max 64, precision.h).
bool exact_sums(int weight_max) {
  if (2 * 255 * weight_max <= 32767) return true;
  const fbgemm::inst_set_t isa = fbgemm::fbgemmInstructionSet();
  return isa == fbgemm::inst_set_t::avx512_vnni || isa == fbgemm::inst_set_t::avx512_vnni_ymm;
}

// The quantized rows q (m x k) as fbgemm multiplies them exactly on this CPU by weights of at most
// weight_max: as they are where its sums are exact; else (weights of 127: caches filled before
// the fingerprint recorded the weights' range) split into the inputs above the zero (0-127) and
// those below it (0-128), which times() multiplies apart, each pair of products then at most
// 128 x 127 x 2, for twice the product's time.
class QuantizedRows {
 public:
  QuantizedRows(const uint8_t* q, int64_t m, int64_t k, int weight_max)
      : q_(q), m_(m), k_(k), split_(!exact_sums(weight_max)) {
    // the thread's buffers, kept between calls
    if (!split_) return;
    const std::size_t size = static_cast<std::size_t>(m * k);
    above_.resize(size);
    below_.resize(size);
    // Through plain pointers: each use of a thread_local in a shared library is a call
    // (__tls_get_addr), which kept these loops from vectorising (fbgemm held to AVX2: the encode
    // loop 5.6-5.9 s that way, 4.2-4.5 s this way; docs/models.md).
    uint8_t* above = above_.data();
    uint8_t* below = below_.data();
    for (std::size_t j = 0; j < size; ++j) {
      above[j] = q[j] > kZero ? static_cast<uint8_t>(q[j] - kZero) : 0;
      below[j] = q[j] < kZero ? static_cast<uint8_t>(kZero - q[j]) : 0;
    }
  }

  // acc (m x w.out) = the rows times w's weight, with the zero's part (kZero x the weight's sums)
  // in, as fbgemm's exact kernels leave it.
  void times(const RowInt8Part& w, int32_t* acc) {
    if (!split_) return gemm(q_, m_, k_, w, acc);
    minus_.resize(static_cast<std::size_t>(m_ * w.out));
    const int32_t* minus = minus_.data();
    const int32_t* zero_sums = w.zero_sums.data();
    gemm(above_.data(), m_, k_, w, acc);
    gemm(below_.data(), m_, k_, w, minus_.data());
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < w.out; ++j) acc[i * w.out + j] += zero_sums[j] - minus[i * w.out + j];
  }

 private:
  const uint8_t* q_;
  int64_t m_, k_;
  bool split_;
  static thread_local std::vector<uint8_t> above_, below_;
  static thread_local std::vector<int32_t> minus_;
};

thread_local std::vector<uint8_t> QuantizedRows::above_, QuantizedRows::below_;
thread_local std::vector<int32_t> QuantizedRows::minus_;

// After part's rows [a, a + m) of out (contiguous, n each) are finished: its GELU, or the residual's
// same rows added and its layer norm, by LibTorch's own kernels on those rows alone (on this
// thread: inside a parallel region ATen's loops run serially). Each row's result depends on that
// row only, as over the whole output.
void epilogue(const RowInt8Part& part, float* out, const float* residual, int64_t a, int64_t m) {
  const int64_t n = part.out;
  at::Tensor rows = at::from_blob(out + a * n, {m, n}, at::TensorOptions().dtype(at::kFloat));
  if (!part.gelu.empty()) {
    // LibTorch's GELU takes a scalar path for the tail its vectors do not fill (within 64 values):
    // rows whose width its vectors fill go as one block, others one by one, so that a value's
    // path (and its last bit) never depends on where its row falls in a block.
    if (n % 64 == 0) {
      at::gelu_(rows, part.gelu);
    } else {
      for (int64_t i = 0; i < m; ++i) {
        at::Tensor row = rows[i];
        at::gelu_(row, part.gelu);
      }
    }
  }
  if (part.norm_weight.defined() && residual) {
    float* y = out + a * n;
    const float* r = residual + a * n;
    for (int64_t j = 0; j < m * n; ++j) y[j] += r[j];
    rows.copy_(at::layer_norm(rows, {n}, part.norm_weight, part.norm_bias, part.norm_eps));
  }
}

// Rows [a, b) of x (m x k, contiguous) into each part's output (m x its n): quantized once,
// multiplied by fbgemm on this thread alone, finished. The int32 sums are written where their
// float32 results go. `residual` (m x n of the one part, or null): what its layer norm adds first.
void rows(const float* x, const std::vector<float*>& outs, const float* residual, int64_t a, int64_t b,
          const RowInt8Weight& w) {
  thread_local std::vector<uint8_t> q;
  thread_local std::vector<float> magnitude;
  const int64_t m = b - a, k = w.in;
  q.resize(static_cast<size_t>(m * k));
  magnitude.resize(static_cast<size_t>(m));
  uint8_t* qd = q.data();  // plain pointers in the loops (QuantizedRows says why)
  float* most = magnitude.data();
  for (int64_t i = 0; i < m; ++i) most[i] = quantize_row(x + (a + i) * k, k, qd + i * k);
  QuantizedRows quantized(qd, m, k, w.weight_max);
  for (std::size_t p = 0; p < w.parts.size(); ++p) {
    const RowInt8Part& part = w.parts[p];
    const int64_t n = part.out;
    int32_t* acc = reinterpret_cast<int32_t*>(outs[p] + a * n);
    quantized.times(part, acc);
    for (int64_t i = 0; i < m; ++i) finish_row(acc + i * n, outs[p] + (a + i) * n, part, most[i]);
    epilogue(part, outs[p], residual, a, m);
  }
}

// Each part's output for input (..., w.in): (..., the part's n). `residual`: what the one part's
// layer norm adds first, of the output's shape (else the norm runs over the whole output after).
std::vector<at::Tensor> row_int8_outputs(const at::Tensor& input, const RowInt8Weight& w,
                                         const std::optional<at::Tensor>& residual = std::nullopt) {
  TORCH_CHECK(input.scalar_type() == at::kFloat && input.device().is_cpu(), "row_int8_linear: float32 CPU input");
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) == w.in, "row_int8_linear: input's last dimension ",
              input.dim() ? input.size(-1) : 0, " is not the layer's ", w.in);
  const at::Tensor x = input.reshape({-1, w.in}).contiguous();
  const int64_t m = x.size(0);
  std::vector<at::Tensor> outs;
  std::vector<float*> out_data;
  for (const RowInt8Part& part : w.parts) {
    outs.push_back(at::empty({m, part.out}, x.options()));
    out_data.push_back(outs.back().data_ptr<float>());
  }
  std::vector<int64_t> shape = input.sizes().vec();
  shape.back() = w.parts.front().out;
  at::Tensor res;  // the residual row by row where it has the output's shape
  if (residual && residual->sizes() == at::IntArrayRef(shape) && residual->scalar_type() == at::kFloat &&
      residual->device().is_cpu())
    res = residual->contiguous();
  const float* xp = x.data_ptr<float>();
  // Rows in one block per thread (at least 16 each): each thread quantizes, multiplies and
  // finishes its own rows, with no wait between the steps.
  parallel_for(0, m, 16, [&](int64_t a, int64_t b) {
    rows(xp, out_data, res.defined() ? res.data_ptr<float>() : nullptr, a, b, w);
  });
  for (std::size_t p = 0; p < outs.size(); ++p) {
    shape.back() = w.parts[p].out;
    outs[p] = outs[p].view(shape);
  }
  const RowInt8Part& one = w.parts.front();
  if (residual && !res.defined())  // broadcast, another type: the graph's own add and norm
    outs[0] = at::layer_norm(outs[0] + *residual, {one.out}, one.norm_weight, one.norm_bias, one.norm_eps);
  return outs;
}

at::Tensor row_int8_linear(const at::Tensor& input, c10::intrusive_ptr<RowInt8Weight> w) {
  TORCH_CHECK(w->parts.size() == 1, "row_int8_linear: a weight of ", w->parts.size(), " layers");
  return row_int8_outputs(input, *w).front();
}

std::vector<at::Tensor> row_int8_linears(const at::Tensor& input, c10::intrusive_ptr<RowInt8Weight> w) {
  return row_int8_outputs(input, *w);
}

at::Tensor row_int8_linear_norm(const at::Tensor& input, const at::Tensor& residual,
                                c10::intrusive_ptr<RowInt8Weight> w) {
  TORCH_CHECK(w->parts.size() == 1 && w->parts.front().norm_weight.defined(),
              "row_int8_linear_norm: a weight without its layer norm");
  return row_int8_outputs(input, *w, residual).front();
}

void register_operator() {
  static torch::class_<RowInt8Weight> weight_class("traincache", "RowInt8Weight");
  static torch::Library library(torch::Library::FRAGMENT, "traincache", std::nullopt, __FILE__, __LINE__);
  library.def("row_int8_linear(Tensor x, __torch__.torch.classes.traincache.RowInt8Weight w) -> Tensor",
              &row_int8_linear);
  library.def("row_int8_linears(Tensor x, __torch__.torch.classes.traincache.RowInt8Weight w) -> Tensor[]",
              &row_int8_linears);
  library.def(
      "row_int8_linear_norm(Tensor x, Tensor residual, __torch__.torch.classes.traincache.RowInt8Weight w) -> Tensor",
      &row_int8_linear_norm);
}

}  // namespace

bool row_int8_available() {
  static const bool available = [] {
    if (!fbgemm::fbgemmSupportedCPU()) return false;
    register_operator();
    return true;
  }();
  return available;
}

c10::IValue row_int8_weight(const at::Tensor& weight, const std::optional<at::Tensor>& bias, int weight_max) {
  TORCH_CHECK(weight_max >= 1 && weight_max <= 127, "row_int8_weight: weight_max ", weight_max, " outside [1, 127]");
  auto w = c10::make_intrusive<RowInt8Weight>();
  w->in = weight.size(1);
  w->weight_max = weight_max;
  RowInt8Part& p = w->parts.emplace_back();
  p.out = weight.size(0);
  const at::Tensor f = weight.to(at::kFloat).contiguous();
  const float* fp = f.data_ptr<float>();
  const int64_t k = w->in;
  // each row's largest magnitude, then the scales as int8.cpp's packed_weight makes them
  at::Tensor largest = at::empty({p.out}, f.options());
  for (int64_t j = 0; j < p.out; ++j) largest.data_ptr<float>()[j] = largest_magnitude(fp + j * k, k);
  const at::Tensor scale = (largest / static_cast<double>(weight_max)).clamp_min(1e-12);
  const at::Tensor inverse = scale.reciprocal().contiguous();
  // round half to even of w * (1 / scale) in float32, in one pass with each row's sum
  std::vector<int8_t> q(static_cast<std::size_t>(p.out * k));
  p.zero_sums.assign(static_cast<std::size_t>(p.out), 0);
  for (int64_t j = 0; j < p.out; ++j)
    p.zero_sums[j] = kZero * quantize_weight_row(fp + j * k, k, inverse.data_ptr<float>()[j], q.data() + j * k);
  p.packed =
      std::make_shared<fbgemm::PackBMatrix<int8_t>>(fbgemm::matrix_op_t::Transpose, static_cast<int32_t>(k),
                                                    static_cast<int32_t>(p.out), q.data(), static_cast<int32_t>(k));
  const at::Tensor scales = (scale.to(at::kFloat) * kStep).contiguous();  // float32 x float32, as fbgemm
  p.scales.assign(scales.data_ptr<float>(), scales.data_ptr<float>() + p.out);
  p.bias.assign(static_cast<size_t>(p.out), 0.0f);
  if (bias) {
    const at::Tensor b = bias->to(at::kFloat).contiguous();
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + p.out, p.bias.begin());
  }
  return c10::IValue(w);
}

c10::IValue row_int8_join(const std::vector<c10::IValue>& weights) {
  auto joined = c10::make_intrusive<RowInt8Weight>();
  for (const c10::IValue& v : weights) {
    const auto w = v.toCustomClass<RowInt8Weight>();
    TORCH_CHECK(joined->parts.empty() || w->in == joined->in, "row_int8_join: layers of different input widths");
    TORCH_CHECK(joined->parts.empty() || w->weight_max == joined->weight_max,
                "row_int8_join: layers of different weight ranges");
    joined->in = w->in;
    joined->weight_max = w->weight_max;
    joined->parts.insert(joined->parts.end(), w->parts.begin(), w->parts.end());
  }
  return c10::IValue(joined);
}

void row_int8_gelu(const c10::IValue& weight, const std::string& approximate) {
  const auto w = weight.toCustomClass<RowInt8Weight>();
  TORCH_CHECK(w->parts.size() == 1, "row_int8_gelu: a weight of ", w->parts.size(), " layers");
  w->parts.front().gelu = approximate;
}

void row_int8_norm(const c10::IValue& weight, const at::Tensor& norm_weight, const at::Tensor& norm_bias, double eps) {
  const auto w = weight.toCustomClass<RowInt8Weight>();
  TORCH_CHECK(w->parts.size() == 1, "row_int8_norm: a weight of ", w->parts.size(), " layers");
  RowInt8Part& p = w->parts.front();
  p.norm_weight = norm_weight.contiguous();
  p.norm_bias = norm_bias.contiguous();
  p.norm_eps = eps;
}

#else  // no fbgemm headers: int8.cpp keeps LibTorch's operators

bool row_int8_available() { return false; }

c10::IValue row_int8_weight(const at::Tensor&, const std::optional<at::Tensor>&, int) { return c10::IValue(); }

c10::IValue row_int8_join(const std::vector<c10::IValue>&) { return c10::IValue(); }

void row_int8_gelu(const c10::IValue&, const std::string&) {}

void row_int8_norm(const c10::IValue&, const at::Tensor&, const at::Tensor&, double) {}

#endif

}  // namespace traincache::model
