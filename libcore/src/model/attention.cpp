#include "traincache/model/attention.h"

#include <torch/library.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "../io/simd_clones.h"
#include "traincache/model/parallel.h"

#define TC_SHORT_ATTENTION (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))

namespace traincache::model {

#if TC_SHORT_ATTENTION
namespace {

// Eight float32 or int32 lanes: GCC's and Clang's vector extensions, built for each clone's
// instructions (simd_clones.h).
typedef float Floats8 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));
typedef uint8_t Bytes8 __attribute__((vector_size(8)));  // eight booleans of a mask

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// x = e^x for x <= 0 (-inf and anything below -87 give 0): x = n ln 2 + r with |r| <= ln 2 / 2,
// e^r by a polynomial of degree 7 (Cephes' expf coefficients: 1.02 ulp at most over every float
// in [-87, 0], against exp in double, measured), 2^n through the
// exponent. (By reference: a vector passed by value changes the ABI between the clones.)
TC_SIMD_INLINE void exp_nonpositive(Floats8& x) {
  const Floats8 zero = {};
  const Floats8 low = x < -87.0f ? zero - 87.0f : x;
  const Floats8 half = low < 0.0f ? zero - 0.5f : zero + 0.5f;
  const Ints8 n = __builtin_convertvector(low * 1.44269504088896341f + half, Ints8);
  const Floats8 nf = __builtin_convertvector(n, Floats8);
  const Floats8 r = low - nf * 0.693359375f + nf * 2.12194440e-4f;
  Floats8 p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const Ints8 bits = (n + 127) << 23;
  Floats8 two_n;
  std::memcpy(&two_n, &bits, sizeof bits);
  const Floats8 y = p * two_n;
  x = x < -87.0f ? zero : y;
}

// One (text, head) of the attention: rows of `queries` and `keys` floats at their strides, the
// mask (booleans to keep, or floats to add; at most one) read at its strides.
struct Head {
  const float *q, *k, *v;
  int64_t q_row, k_row, v_row;
  const bool* keep;
  const float* add;
  int64_t mask_row, mask_col;
  int64_t queries, keys;
  float scale;
  float* out;
  int64_t out_row;
};

constexpr int64_t kMaxKeys = (kShortAttention + 7) / 8 * 8;

// The scores of query i against every key into s (kMaxKeys floats; past the keys, -inf), scaled
// and masked; their largest.
template <int D>
TC_SIMD_INLINE float scores(const Head& h, const float* kt, int64_t padded, int64_t i, float* s) {
  const float* q = h.q + i * h.q_row;
  for (int64_t j = 0; j < padded; j += 8) {
    Floats8 acc[4] = {};  // four sums over d (d mod 4), so that the multiply-adds do not wait on each other
    for (int d = 0; d < D; d += 4)
      for (int u = 0; u < 4; ++u) {
        Floats8 k;
        std::memcpy(&k, kt + (d + u) * padded + j, sizeof k);
        acc[u] += q[d + u] * k;
      }
    const Floats8 sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    std::memcpy(s + j, &sum, sizeof sum);
  }
  float most = kMinusInf;
  int64_t j = 0;
  if (!(h.keep || h.add) || h.mask_col == 1) {  // eight keys at a time where the mask's row is contiguous
    Floats8 top = Floats8{} + kMinusInf;
    for (; j + 8 <= h.keys; j += 8) {
      Floats8 x;
      std::memcpy(&x, s + j, sizeof x);
      x *= h.scale;
      if (h.keep) {
        Bytes8 keep;
        std::memcpy(&keep, h.keep + i * h.mask_row + j, sizeof keep);
        x = __builtin_convertvector(keep, Ints8) != 0 ? x : Floats8{} + kMinusInf;
      }
      if (h.add) {
        Floats8 a;
        std::memcpy(&a, h.add + i * h.mask_row + j, sizeof a);
        x += a;
      }
      std::memcpy(s + j, &x, sizeof x);
      top = x > top ? x : top;  // NaN never taken, as below; which zero is kept changes no result
    }
    for (int l = 0; l < 8; ++l) most = top[l] > most ? top[l] : most;
  }
  for (; j < h.keys; ++j) {
    float x = s[j] * h.scale;
    if (h.keep && !h.keep[i * h.mask_row + j * h.mask_col]) x = kMinusInf;
    if (h.add) x += h.add[i * h.mask_row + j * h.mask_col];
    s[j] = x;
    most = x > most ? x : most;
  }
  for (int64_t j = h.keys; j < padded; ++j) s[j] = kMinusInf;
  return most;
}

// kt (D x padded) = the keys transposed, zeros past them: eight keys by eight values at a time,
// moved by the vectors' shuffles (GCC 12 and Clang have __builtin_shufflevector).
template <int D>
TC_SIMD_INLINE void transpose_keys(const Head& h, int64_t padded, float* kt) {
  for (int64_t j = 0; j < padded; j += 8)
    for (int d = 0; d < D; d += 8) {
      Floats8 r[8];
      for (int i = 0; i < 8; ++i)
        if (j + i < h.keys)
          std::memcpy(&r[i], h.k + (j + i) * h.k_row + d, sizeof r[i]);
        else
          r[i] = Floats8{};
      // pairs of keys interleaved, then fours, then the two halves: row i of the result is value
      // d + i of keys j..j+7
      Floats8 t[8], u[8];
      for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      for (int i = 0; i < 8; i += 4)
        for (int odd = 0; odd < 2; ++odd) {
          u[i + 2 * odd] = __builtin_shufflevector(t[i + odd], t[i + 2 + odd], 0, 1, 8, 9, 4, 5, 12, 13);
          u[i + 2 * odd + 1] = __builtin_shufflevector(t[i + odd], t[i + 2 + odd], 2, 3, 10, 11, 6, 7, 14, 15);
        }
      for (int i = 0; i < 4; ++i) {
        const Floats8 low = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        const Floats8 high = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
        std::memcpy(kt + (d + i) * padded + j, &low, sizeof low);
        std::memcpy(kt + (d + i + 4) * padded + j, &high, sizeof high);
      }
    }
}

// Softmax of each query's scores, times the values. A query's output depends on its own scores and
// the keys' values only: padding keys (masked out) add exact zeros.
template <int D>
TC_SIMD_CLONES void one_head(const Head& h) {
  const int64_t padded = (h.keys + 7) / 8 * 8;
  alignas(32) float kt[D * kMaxKeys];  // the keys transposed: eight keys' d-th values side by side
  alignas(32) float s[kMaxKeys];
  transpose_keys<D>(h, padded, kt);
  for (int64_t i = 0; i < h.queries; ++i) {
    float* o = h.out + i * h.out_row;
    const float most = scores<D>(h, kt, padded, i, s);
    if (most == kMinusInf) {  // every key masked out: zeros, as LibTorch's attention gives
      std::memset(o, 0, D * sizeof(float));
      continue;
    }
    Floats8 sum = {};
    for (int64_t j = 0; j < padded; j += 8) {
      Floats8 x;
      std::memcpy(&x, s + j, sizeof x);
      x -= most;
      exp_nonpositive(x);
      sum += x;
      std::memcpy(s + j, &x, sizeof x);
    }
    float total = 0;
    for (int l = 0; l < 8; ++l) total += sum[l];
    Floats8 acc[D / 8] = {};
    for (int64_t j = 0; j < h.keys; ++j)
      for (int c = 0; c < D / 8; ++c) {
        Floats8 x;
        std::memcpy(&x, h.v + j * h.v_row + 8 * c, sizeof x);
        acc[c] += s[j] * x;
      }
    const float inverse = 1.0f / total;
    for (int c = 0; c < D / 8; ++c) {
      const Floats8 y = acc[c] * inverse;
      std::memcpy(o + 8 * c, &y, sizeof y);
    }
  }
}

// Whether our kernel takes this call: float32 on the CPU, four dimensions of 32 or 64 values a
// head with the last contiguous, as many key heads as query heads, kShortAttention queries and keys
// or fewer, no dropout, no causal mask, a mask (if any) of booleans or float32.
bool ours(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
          double dropout, bool causal, bool gqa) {
  if (dropout != 0 || causal || gqa || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  for (const at::Tensor* t : {&q, &k, &v})
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || t->stride(3) != 1) return false;
  const int64_t d = q.size(3);
  if ((d != 32 && d != 64) || k.size(3) != d || v.size(3) != d || k.size(0) != q.size(0) || v.size(0) != q.size(0))
    return false;
  if (k.size(1) != q.size(1) || v.size(1) != q.size(1) || v.size(2) != k.size(2)) return false;
  if (q.size(2) > kShortAttention || k.size(2) > kShortAttention) return false;
  return !mask || mask->scalar_type() == at::kBool || mask->scalar_type() == at::kFloat;
}

// The output in (text, query, head, value) memory, as the layers after attention read it, returned
// as LibTorch's attention returns it: (text, head, query, value).
at::Tensor run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
               double scale) {
  const int64_t texts = q.size(0), heads = q.size(1), queries = q.size(2), keys = k.size(2), d = q.size(3);
  at::Tensor out = at::empty({texts, queries, heads, d}, q.options());
  const at::Tensor m = mask ? mask->expand({texts, heads, queries, keys}) : at::Tensor();
  parallel_for(0, texts * heads, 1, [&](int64_t a, int64_t b) {
    for (int64_t th = a; th < b; ++th) {
      const int64_t t = th / heads, hd = th % heads;
      Head h{q.data_ptr<float>() + t * q.stride(0) + hd * q.stride(1),
             k.data_ptr<float>() + t * k.stride(0) + hd * k.stride(1),
             v.data_ptr<float>() + t * v.stride(0) + hd * v.stride(1),
             q.stride(2),
             k.stride(2),
             v.stride(2),
             nullptr,
             nullptr,
             0,
             0,
             queries,
             keys,
             static_cast<float>(scale),
             out.data_ptr<float>() + (t * queries * heads + hd) * d,
             heads * d};
      if (m.defined()) {
        const int64_t at_head = t * m.stride(0) + hd * m.stride(1);
        if (m.scalar_type() == at::kBool)
          h.keep = m.data_ptr<bool>() + at_head;
        else
          h.add = m.data_ptr<float>() + at_head;
        h.mask_row = m.stride(2);
        h.mask_col = m.stride(3);
      }
      if (d == 32)
        one_head<32>(h);
      else
        one_head<64>(h);
    }
  });
  return out.transpose(1, 2);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout, bool causal, std::optional<double> scale,
                     bool gqa) {
  if (!ours(q, k, v, mask, dropout, causal, gqa))
    return at::scaled_dot_product_attention(q, k, v, mask, dropout, causal, scale, gqa);
  return run(q, k, v, mask, scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
}

void register_attention() {
  static torch::Library library(torch::Library::FRAGMENT, "traincache", std::nullopt, __FILE__, __LINE__);
  library.def(
      "attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, "
      "bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
      &attention);
}

// The attention nodes of `block` and of the blocks within it.
void attention_nodes(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  static const c10::Symbol sdpa = c10::Symbol::fromQualString("aten::scaled_dot_product_attention");
  for (torch::jit::Node* n : block->nodes()) {
    if (n->kind() == sdpa && n->inputs().size() == 8) out.push_back(n);
    for (torch::jit::Block* b : n->blocks()) attention_nodes(b, out);
  }
}

}  // namespace

int short_attention(torch::jit::Graph& graph) {
  static const bool registered = (register_attention(), true);
  (void)registered;
  std::vector<torch::jit::Node*> found;
  attention_nodes(graph.block(), found);
  for (torch::jit::Node* n : found) {
    torch::jit::Node* replacement = graph.create(c10::Symbol::fromQualString("traincache::attention"), n->inputs(), 1);
    replacement->insertBefore(n);
    replacement->output()->setType(n->output()->type());
    n->output()->replaceAllUsesWith(replacement->output());
    n->destroy();
  }
  return static_cast<int>(found.size());
}

#else  // LibTorch before 2.5

int short_attention(torch::jit::Graph&) { return 0; }

#endif

}  // namespace traincache::model
