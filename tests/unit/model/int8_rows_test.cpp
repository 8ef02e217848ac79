#include "traincache/model/int8_rows.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <limits>

#if __has_include(<fbgemm/Fbgemm.h>)
#include <fbgemm/Fbgemm.h>
#endif

#include "catch.h"
#include "graph_nodes.h"
#include "traincache/model/int8.h"

using namespace traincache;
using testing::nodes_of;

namespace {

// docs/models.md's arithmetic in float64 where it is exact: each weight row rounded to int8 at its
// largest magnitude / weight_max (64 for new caches, 127 in those filled before); each input row
// divided by its largest magnitude, times 1 / (2/255) in float32, rounded half to even and clipped
// to [-128, 127]; integer products; scaled back by the float32 scales and the row's magnitude; the
// bias added.
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                        int weight_max = model::kInt8WeightMax) {
  const torch::Tensor ws = (w.abs().amax({1}) / static_cast<double>(weight_max)).clamp_min(1e-12);
  const torch::Tensor wq = (w * ws.reciprocal().unsqueeze(1)).round().clamp(-128, 127).to(torch::kDouble);
  const torch::Tensor r = torch::maximum(x.amin({1}, true).neg(), x.amax({1}, true)).clamp_min(1e-30);
  const float inverse = 1.0f / (2.0f / 255);
  const torch::Tensor xq = ((x / r) * inverse).round().clamp(-128, 127).to(torch::kDouble);
  const torch::Tensor scale = (ws * (2.0f / 255)).to(torch::kDouble);
  return torch::matmul(xq, wq.t()) * scale * r.to(torch::kDouble) + b.to(torch::kDouble);
}

torch::Tensor row_int8_linear(const torch::Tensor& x, const c10::IValue& weight) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(model::kRowInt8Linear, "");
  torch::jit::Stack stack{x, weight};
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

// (used only where this build has fbgemm's headers)
[[maybe_unused]] std::vector<torch::Tensor> row_int8_linears(const torch::Tensor& x, const c10::IValue& weight) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(model::kRowInt8Linears, "");
  torch::jit::Stack stack{x, weight};
  op.callBoxed(&stack);
  return stack.at(0).toTensorVector();
}

}  // namespace

CATCH_TEST_CASE("row int8 linear: docs/models.md's arithmetic, each row on its own, any leading shape", "[int8]") {
  if (!model::row_int8_available()) {  // no fbgemm headers in this LibTorch (Debian's): int8.cpp keeps LibTorch's
    CATCH_CHECK(model::row_int8_weight(torch::ones({2, 2}), std::nullopt).isNone());
    return;
  }
  torch::manual_seed(0);
  // 37 inputs (not a multiple of the 8 lanes), 50 rows (blocks of uneven size over the threads).
  const torch::Tensor w = torch::randn({48, 37}) / 5, b = torch::randn({48});
  torch::Tensor x = torch::randn({50, 37}) * 3;
  x[3].zero_();
  x[7][5] = std::numeric_limits<float>::quiet_NaN();
  x[9][36] = std::numeric_limits<float>::infinity();
  x[11][0] = -x[11].abs().max().item<float>() * 2;  // the largest magnitude negative: -1 exactly
  const c10::IValue weight = model::row_int8_weight(w, b);
  c10::InferenceMode guard;
  const torch::Tensor got = row_int8_linear(x, weight), want = reference(x, w, b);
  CATCH_REQUIRE(got.sizes() == torch::IntArrayRef({50, 48}));
  const torch::Tensor finite = torch::ones({50}, torch::kBool).index_put_({torch::tensor({7, 9})}, false);
  const double top = want.index({finite}).abs().max().item<double>();
  CATCH_CHECK((got.index({finite}).to(torch::kDouble) - want.index({finite})).abs().max().item<double>() <= 1e-6 * top);
  CATCH_CHECK(torch::equal(got[3], b));                  // a row of zeros: the bias
  CATCH_CHECK(torch::isnan(got[7]).all().item<bool>());  // NaN and infinity as LibTorch's operators give them
  CATCH_CHECK(torch::isnan(got[9]).all().item<bool>());
  // A row's output is the same bits alone, in any block of rows, and under leading dimensions.
  for (int64_t i : {0, 11, 49}) CATCH_CHECK(torch::equal(row_int8_linear(x.slice(0, i, i + 1), weight)[0], got[i]));
  CATCH_CHECK(torch::equal(row_int8_linear(x.slice(0, 20, 50).reshape({5, 6, 37}), weight).reshape({30, 48}),
                           got.slice(0, 20, 50)));
  CATCH_CHECK(row_int8_linear(x.slice(0, 0, 0), weight).sizes() == torch::IntArrayRef({0, 48}));
  CATCH_CHECK_THROWS(row_int8_linear(torch::ones({2, 36}), weight));
  // Without a bias: no bias added.
  const torch::Tensor plain = row_int8_linear(x.slice(0, 0, 3), model::row_int8_weight(w, std::nullopt));
  CATCH_CHECK((plain.to(torch::kDouble) - (want.slice(0, 0, 3) - b.to(torch::kDouble))).abs().max().item<double>() <=
              1e-6 * top);
}

CATCH_TEST_CASE("row int8 linear: weights rounded half to even at their row's scale", "[int8]") {
  if (!model::row_int8_available()) return;
  // Weights at exact half steps of their row's scale (largest / 64 = 2^-7): 0.5, 1.5, -2.5 steps
  // round to 0, 2, -2; each one-hot input row gives one weight back times its scale.
  CATCH_REQUIRE(model::kInt8WeightMax == 64);
  torch::Tensor w = torch::tensor({64.0f, 0.5f, 1.5f, -2.5f, 3.5f, -0.5f, 0.0f, 4.5f}).reshape({1, 8}) / 128;
  w = torch::cat({w, -w * 0.5});
  const torch::Tensor x = torch::eye(8);
  c10::InferenceMode guard;
  const torch::Tensor got = row_int8_linear(x, model::row_int8_weight(w, std::nullopt));
  const torch::Tensor want = reference(x, w, torch::zeros({2}));
  CATCH_CHECK((got.to(torch::kDouble) - want).abs().max().item<double>() <= 1e-6 * want.abs().max().item<double>());
  // the steps themselves, half to even: 64, 0, 2, -2, 4, 0, 0, 4
  const torch::Tensor steps = (got.t()[0] / ((1.0 / 128) * (127.0 * 2 / 255))).round();
  CATCH_CHECK(torch::equal(steps, torch::tensor({64.0f, 0.0f, 2.0f, -2.0f, 4.0f, -0.0f, 0.0f, 4.0f})));
}

CATCH_TEST_CASE("row int8 linear: inputs a few float steps from a half step round as the division does", "[int8]") {
  if (!model::row_int8_available()) return;
  // Each row: its largest magnitude first (3.0, 1e-3 or -7.5), then values whose
  // (x / largest) x (1 / step) lies 0, 1, 2, 4 or 64 float32 steps either side of a half (n + 0.5):
  // the values that any shortcut of the division (a multiplication by (1 / step) / largest, as
  // tried) rounds the other way. 64 values a row: whole blocks of 8 and 16 lanes.
  std::vector<float> values;
  for (const float largest : {3.0f, 1e-3f, -7.5f})
    for (int n = -128; n <= 127; n += 37)
      for (int side : {-1, 1}) {
        std::vector<float> row{largest};
        for (int off : {0, 1, 2, 4, 64}) {
          float x = static_cast<float>((n + 0.5) / (255.0 / 2) * std::fabs(largest));
          for (int i = 0; i < off; ++i) x = std::nextafter(x, side * std::numeric_limits<float>::infinity());
          for (int i = 0; i < 4 && row.size() < 64; ++i) row.push_back(x);
        }
        while (row.size() < 64) row.push_back(0.25f * largest);
        values.insert(values.end(), row.begin(), row.end());
      }
  const torch::Tensor x = torch::tensor(values).reshape({-1, 64});
  // One output per input (the identity's rows), so that each output names its input's step.
  const torch::Tensor w = torch::eye(64);
  c10::InferenceMode guard;
  const torch::Tensor got = row_int8_linear(x, model::row_int8_weight(w, std::nullopt));
  const torch::Tensor r = x.abs().amax({1}, true);
  const torch::Tensor want = ((x / r) * (1.0f / (2.0f / 255))).round().clamp(-128, 127);
  const torch::Tensor steps = (got.to(torch::kDouble) / (r.to(torch::kDouble) * (2.0 / 255))).round();
  CATCH_CHECK(torch::equal(steps.to(torch::kFloat), want));
}

CATCH_TEST_CASE("row int8 linear: exact where fbgemm's kernels would saturate a pair of products", "[int8]") {
#if __has_include(<fbgemm/Fbgemm.h>)
  if (!model::row_int8_available()) return;
  // Inputs near their row's largest value (bytes near 255) against weights near their row's
  // largest in adjacent pairs: fbgemm's AVX2 kernels add such a pair in 16 bits (at most 32,767).
  // At 64 steps (new caches) a pair is at most 32,640, one product; at 127 (caches filled before)
  // the operator multiplies in two parts. Run on fbgemm's AVX2 kernels (every CPU fbgemm supports
  // has AVX2) and on this CPU's own; the weights at their row's largest reach 64 (or 127) exactly.
  const fbgemm::inst_set_t own = fbgemm::fbgemmInstructionSet();
  for (const fbgemm::inst_set_t isa : {fbgemm::inst_set_t::avx2, own})
    for (const int most : {model::kInt8WeightMax, 127}) {  // 127: caches filled before 2026-12-04
      fbgemm::fbgemmForceIsa(isa);
      torch::manual_seed(2);
      torch::Tensor w = torch::rand({24, 64}) * 0.1 + 0.9;
      w.slice(1, 0, 8).fill_(1.0f);  // eight weights a row at the row's largest: 64 (or 127) steps
      const torch::Tensor b = torch::randn({24});
      torch::Tensor x = torch::cat({torch::rand({20, 64}) * 0.1 + 0.9, -(torch::rand({20, 64}) * 0.1 + 0.9)});
      x.slice(1, 0, 8).mul_(2.0f);  // the row's largest: 255 (or 1 above the zero's 128 steps below)
      const torch::Tensor w2 = -(torch::rand({8, 64}) * 0.1 + 0.9), b2 = torch::randn({8});
      const c10::IValue weight = model::row_int8_weight(w, b, most);
      c10::InferenceMode guard;
      auto near = [](const torch::Tensor& got, const torch::Tensor& want) {
        return (got.to(torch::kDouble) - want).abs().max().item<double>() <= 1e-6 * want.abs().max().item<double>();
      };
      CATCH_CHECK(near(row_int8_linear(x, weight), reference(x, w, b, most)));
      // two layers on the rows quantized once
      const auto both = row_int8_linears(x, model::row_int8_join({weight, model::row_int8_weight(w2, b2, most)}));
      CATCH_REQUIRE(both.size() == 2);
      CATCH_CHECK(near(both[0], reference(x, w, b, most)));
      CATCH_CHECK(near(both[1], reference(x, w2, b2, most)));
    }
  fbgemm::fbgemmForceIsa(own);
  // Layers of different ranges do not join; a range outside int8's is refused.
  const torch::Tensor w = torch::randn({4, 8});
  CATCH_CHECK_THROWS(model::row_int8_join(
      {model::row_int8_weight(w, std::nullopt, 64), model::row_int8_weight(w, std::nullopt, 127)}));
  CATCH_CHECK_THROWS(model::row_int8_weight(w, std::nullopt, 128));
  CATCH_CHECK_THROWS(model::row_int8_weight(w, std::nullopt, 0));
#endif
}

CATCH_TEST_CASE("int8 module: every constant linear layer runs the row operator where this build has it", "[int8]") {
  if (!model::int8_unavailable().empty()) return;  // LibTorch 1.x: cache-fill refuses int8 (precision.test.sh)
  torch::manual_seed(1);
  torch::jit::Module m = testing::two_linear_module("tanh");
  model::Int8Conversion done;
  torch::jit::Module q = model::int8_module(m, "test", &done);
  CATCH_CHECK(done.linears == 2);
  CATCH_CHECK(nodes_of(q, "aten::linear") == 0);
  CATCH_CHECK(nodes_of(q, model::kRowInt8Linear) == (model::row_int8_available() ? 2 : 0));
  c10::InferenceMode guard;
  const torch::Tensor x = torch::randn({40, 32});
  const torch::Tensor got = q.forward({x}).toTensor();
  const torch::Tensor w1 = m.attr("w1").toTensor(), b1 = m.attr("b1").toTensor(), w2 = m.attr("w2").toTensor();
  if (!model::row_int8_available()) {  // LibTorch's kernels (Debian 13): precision.test.sh checks their arithmetic
    const torch::Tensor f32 = m.forward({x}).toTensor();
    CATCH_CHECK((got - f32).abs().max().item<double>() <= 0.05 * f32.abs().max().item<double>());
    return;
  }
  // The graph is the two operators with the tanh between them, the same bits.
  const torch::Tensor h = torch::tanh(row_int8_linear(x, model::row_int8_weight(w1, b1)));
  CATCH_CHECK(torch::equal(got, row_int8_linear(h, model::row_int8_weight(w2, std::nullopt))));
  // And the arithmetic: a hidden value near a rounding step can land one step over in float64.
  const torch::Tensor want = reference(torch::tanh(reference(x, w1, b1)).to(torch::kFloat), w2, torch::zeros({16}));
  const torch::Tensor off = (got.to(torch::kDouble) - want).abs().amax({1});
  const double top = want.abs().max().item<double>();
  CATCH_CHECK((off <= 1e-6 * top).to(torch::kDouble).mean().item<double>() >= 0.9);
  CATCH_CHECK(off.max().item<double>() <= 0.02 * top);
}

CATCH_TEST_CASE("int8 module: layers on the same input run as one call of the row operator, the same bits", "[int8]") {
  if (!model::row_int8_available()) return;  // LibTorch's kernels: a call per layer
  torch::manual_seed(2);
  torch::jit::Module m("M");
  m.register_parameter("wq", torch::randn({16, 32}) / 6, false);
  m.register_parameter("bq", torch::randn({16}), false);
  m.register_parameter("wk", torch::randn({24, 32}) / 6, false);
  m.register_parameter("wv", torch::randn({8, 32}) / 6, false);
  m.register_parameter("bv", torch::randn({8}), false);
  m.register_parameter("wo", torch::randn({8, 16}) / 4, false);
  // q's result is used before k and v are computed; o reads q's output, not x
  m.define(R"(
def forward(self, x):
  q = torch.linear(x, self.wq, self.bq)
  t = q.sum()
  k = torch.linear(x, self.wk) + t
  v = torch.linear(x, self.wv, self.bv)
  o = torch.linear(torch.tanh(q), self.wo)
  return torch.cat([q, k, v, o], -1)
)");
  m.eval();
  model::Int8Conversion done;
  torch::jit::Module q = model::int8_module(m, "test", &done);
  CATCH_CHECK(done.linears == 4);
  CATCH_CHECK(nodes_of(q, model::kRowInt8Linears) == 1);
  CATCH_CHECK(nodes_of(q, model::kRowInt8Linear) == 1);
  c10::InferenceMode guard;
  for (const int64_t rows : {1, 5, 40}) {
    const torch::Tensor x = torch::randn({2, rows, 32});
    const torch::Tensor got = q.forward({x}).toTensor();
    auto attr = [&](const char* name) { return m.attr(name).toTensor(); };
    const torch::Tensor yq = row_int8_linear(x, model::row_int8_weight(attr("wq"), attr("bq")));
    const torch::Tensor yk = row_int8_linear(x, model::row_int8_weight(attr("wk"), std::nullopt)) + yq.sum();
    const torch::Tensor yv = row_int8_linear(x, model::row_int8_weight(attr("wv"), attr("bv")));
    const torch::Tensor yo = row_int8_linear(torch::tanh(yq), model::row_int8_weight(attr("wo"), std::nullopt));
    CATCH_CHECK(torch::equal(got, torch::cat({yq, yk, yv, yo}, -1)));
  }
}

CATCH_TEST_CASE("int8 module: a GELU, or a residual and a layer norm, after a layer fold into its operator", "[int8]") {
  if (!model::row_int8_available()) return;  // LibTorch's kernels: nothing folded
  torch::manual_seed(3);
  torch::jit::Module m("M");
  m.register_parameter("wa", torch::randn({64, 32}) / 6, false);
  m.register_parameter("ba", torch::randn({64}), false);
  m.register_parameter("wb", torch::randn({32, 64}) / 8, false);
  m.register_parameter("wc", torch::randn({32, 32}) / 6, false);
  m.register_parameter("wd", torch::randn({32, 32}) / 6, false);
  m.register_parameter("r", torch::randn({32}), false);
  m.register_parameter("g", torch::rand({32}) + 0.5, false);
  m.register_parameter("b", torch::randn({32}), false);
  // the residual on either side of the add; the last one broadcast (a vector): added apart
  m.define(R"(
def forward(self, x):
  h = torch.gelu(torch.linear(x, self.wa, self.ba))
  y = torch.layer_norm(x + torch.linear(h, self.wb), [32], self.g, self.b, 1e-5)
  z = torch.layer_norm(torch.linear(y, self.wc) + y, [32], self.g, self.b, 1e-6)
  return torch.layer_norm(torch.linear(z, self.wd) + self.r, [32], self.g, self.b, 1e-5)
)");
  m.eval();
  torch::jit::Module q = model::int8_module(m, "test", nullptr);
  CATCH_CHECK(nodes_of(q, model::kRowInt8Linear) == 1);
  CATCH_CHECK(nodes_of(q, model::kRowInt8LinearNorm) == 3);
  CATCH_CHECK(nodes_of(q, "aten::gelu") == 0);
  CATCH_CHECK(nodes_of(q, "aten::layer_norm") == 0);
  c10::InferenceMode guard;
  auto attr = [&](const char* name) { return m.attr(name).toTensor(); };
  auto layer = [&](const torch::Tensor& x, const char* w, std::optional<torch::Tensor> b = std::nullopt) {
    return row_int8_linear(x, model::row_int8_weight(attr(w), b));
  };
  auto norm = [&](const torch::Tensor& x, double eps) { return torch::layer_norm(x, {32}, attr("g"), attr("b"), eps); };
  for (const int64_t rows : {1, 7, 40}) {
    const torch::Tensor x = torch::randn({2, rows, 32});
    const torch::Tensor h = torch::gelu(layer(x, "wa", attr("ba")));
    const torch::Tensor y = norm(x + layer(h, "wb"), 1e-5);
    const torch::Tensor z = norm(layer(y, "wc") + y, 1e-6);
    const torch::Tensor want = norm(layer(z, "wd") + attr("r"), 1e-5);
    CATCH_CHECK(torch::equal(q.forward({x}).toTensor(), want));
  }
}

CATCH_TEST_CASE("int8 module: a folded GELU over a width its vectors do not fill goes row by row", "[int8]") {
  if (!model::row_int8_available()) return;
  torch::manual_seed(4);
  torch::jit::Module m("M");
  m.register_parameter("w", torch::randn({37, 32}) / 6, false);
  m.register_parameter("b", torch::randn({37}), false);
  // tanh's approximation: LibTorch's scalar and vector paths differ in last bits for it
  m.define("def forward(self, x):\n  return torch.gelu(torch.linear(x, self.w, self.b), approximate='tanh')\n");
  m.eval();
  torch::jit::Module q = model::int8_module(m, "test", nullptr);
  CATCH_REQUIRE(nodes_of(q, "aten::gelu") == 0);
  c10::InferenceMode guard;
  const c10::IValue weight = model::row_int8_weight(m.attr("w").toTensor(), m.attr("b").toTensor());
  const torch::Tensor x = torch::randn({45, 32}) * 2;
  const torch::Tensor got = q.forward({x}).toTensor();
  // each row as LibTorch's GELU gives it on that row alone, in any batch
  for (int64_t i = 0; i < 45; ++i) {
    const torch::Tensor alone = torch::gelu(row_int8_linear(x.slice(0, i, i + 1), weight), "tanh");
    CATCH_CHECK(torch::equal(got.slice(0, i, i + 1), alone));
  }
  CATCH_CHECK(torch::equal(q.forward({x.slice(0, 10, 45)}).toTensor(), got.slice(0, 10, 45)));
}
