#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "traincache/gradcache.h"

using namespace traincache;

namespace {

// A two-layer tanh MLP as a TorchScript module, with optional dropout, seeded.
torch::jit::Module mlp(uint64_t seed, double dropout, torch::Dtype dtype, int64_t in = 6, int64_t out = 4) {
  torch::manual_seed(seed);
  torch::jit::Module m("Tower");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({8, in}, dtype) * 0.5, false);
  m.register_parameter("b1", torch::randn({8}, dtype) * 0.1, false);
  m.register_parameter("w2", torch::randn({out, 8}, dtype) * 0.5, false);
  m.define("def forward(self, x):\n"
           "  h = torch.tanh(torch.matmul(x, self.w1.t()) + self.b1)\n"
           "  h = torch.dropout(h, " + std::to_string(dropout) + ", self.training)\n"
           "  return torch.matmul(h, self.w2.t())\n");
  for (auto p : m.parameters()) p.set_requires_grad(true);
  m.train();
  return m;
}

gc::Tower tower(torch::jit::Module& m) {
  return [&m](const std::vector<torch::Tensor>& in) {
    return m.forward(std::vector<torch::jit::IValue>(in.begin(), in.end())).toTensor();
  };
}

struct Setup {
  bool tied = true;
  int64_t k = 0;  // hard negatives
  gc::LossConfig loss;
  int64_t batch = 10, qchunk = 3, pchunk = 4;
  double dropout = 0;
};

// Runs `steps` SGD steps (lr 0.1) with the given mode; returns the parameters afterwards.
std::vector<torch::Tensor> train(const Setup& s, const gc::StepMode& mode, torch::Dtype dtype, int steps,
                                 torch::Tensor* rng_after = nullptr) {
  auto qm = mlp(1, s.dropout, dtype), pm = mlp(2, s.dropout, dtype);
  torch::jit::Module& pmod = s.tied ? qm : pm;
  std::vector<torch::Tensor> params;
  for (auto p : qm.parameters()) params.push_back(p);
  if (!s.tied)
    for (auto p : pm.parameters()) params.push_back(p);
  torch::manual_seed(99);
  auto q_all = torch::randn({steps, s.batch, 6}, dtype);
  auto p_all = torch::randn({steps, s.batch * (1 + s.k), 6}, dtype);
  auto labels = torch::tensor({0, 1, 0, 2, 1, 1, 0, 2, 2, 0}, torch::kLong).slice(0, 0, s.batch);
  torch::manual_seed(7);  // the dropout stream
  for (int i = 0; i < steps; ++i) {
    for (auto& p : params)
      if (p.grad().defined()) p.grad().zero_();
    gc::SideBatch qb{tower(qm), {q_all[i]}, s.qchunk};
    gc::SideBatch pb{tower(pmod), {p_all[i]}, s.pchunk};
    gc::step(qb, pb, labels, s.loss, mode);
    torch::NoGradGuard no_grad;
    for (auto& p : params) p.sub_(p.grad() * 0.1);
  }
  if (rng_after) *rng_after = at::detail::getDefaultCPUGenerator().get_state();
  std::vector<torch::Tensor> out;
  for (auto& p : params) out.push_back(p.detach().clone());
  return out;
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

double max_rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, ((a[i] - b[i]).norm() / b[i].norm()).item<double>());
  return m;
}

std::vector<std::pair<std::string, Setup>> setups() {
  std::vector<std::pair<std::string, Setup>> v;
  Setup base;
  v.push_back({"tied, cos, uneven last chunks", base});
  Setup sep = base;
  sep.tied = false;
  v.push_back({"separate encoders", sep});
  Setup neg = base;
  neg.k = 2;
  v.push_back({"two hard negatives per query", neg});
  Setup sym = base;
  sym.loss.kind = gc::LossKind::symmetric;
  v.push_back({"symmetric loss", sym});
  Setup temp = base;
  temp.loss.similarity = gc::Similarity::dot;
  temp.loss.temperature = 0.3;
  v.push_back({"dot similarity, temperature 0.3", temp});
  Setup sup = base;
  sup.loss.kind = gc::LossKind::supcon;
  v.push_back({"supervised contrastive (grouped)", sup});
  Setup big = base;
  big.qchunk = 64;
  big.loss.anchor_chunk = 4;
  v.push_back({"chunk larger than the batch, loss in anchor chunks of 4", big});
  return v;
}

}  // namespace

CATCH_TEST_CASE("gradient cache: SGD steps equal full-batch steps in float64 within 1e-12", "[gradcache]") {
  for (const auto& [name, s] : setups()) {
    CATCH_INFO(name);
    gc::StepMode cached, full;
    full.gradcache = false;
    auto a = train(s, cached, torch::kFloat64, 3);
    auto b = train(s, full, torch::kFloat64, 3);
    CATCH_CHECK(max_abs_diff(a, b) <= 1e-12);
    // The check can fail: a different loss gives different parameters.
    Setup other = s;
    other.loss.temperature = s.loss.temperature * 2;
    CATCH_CHECK(max_abs_diff(train(other, cached, torch::kFloat64, 3), b) > 1e-6);
  }
}

CATCH_TEST_CASE("gradient cache: SGD steps equal full-batch steps in float32 within 1e-5 relative", "[gradcache]") {
  for (const auto& [name, s] : setups()) {
    CATCH_INFO(name);
    gc::StepMode cached, full;
    full.gradcache = false;
    // 1e-5 relative, per parameter tensor (||a - b|| / ||b||): float32 sums in another order.
    CATCH_CHECK(max_rel_diff(train(s, cached, torch::kFloat32, 3), train(s, full, torch::kFloat32, 3)) <= 1e-5);
  }
}

CATCH_TEST_CASE("gradient cache: with dropout the step equals a chunked step that keeps its graph", "[gradcache]") {
  Setup s;
  s.dropout = 0.3;
  s.tied = false;
  gc::StepMode cached, chunked_graph, no_restore;
  chunked_graph.gradcache = false;
  chunked_graph.keep_chunk_graphs = true;
  no_restore.restore_rng = false;
  torch::Tensor rng_a, rng_b;
  auto a = train(s, cached, torch::kFloat64, 3, &rng_a);
  auto b = train(s, chunked_graph, torch::kFloat64, 3, &rng_b);
  CATCH_CHECK(max_abs_diff(a, b) <= 1e-12);
  // The global random state after the steps is as if every chunk had run once.
  CATCH_CHECK(torch::equal(rng_a, rng_b));
  // Negative control: replaying with fresh randomness gives other dropout masks.
  CATCH_CHECK(max_abs_diff(train(s, no_restore, torch::kFloat64, 3), b) > 1e-6);
}

CATCH_TEST_CASE("loss: dot similarity at temperature 1 is GradCache's SimpleContrastiveLoss", "[gradcache]") {
  torch::manual_seed(3);
  auto q = torch::randn({5, 4}, torch::kFloat64), p = torch::randn({15, 4}, torch::kFloat64);
  gc::LossConfig cfg;
  cfg.similarity = gc::Similarity::dot;
  cfg.temperature = 1.0;
  // SimpleContrastiveLoss: logits = q p^T, target = arange(B) * (|p| / |q|), mean cross-entropy.
  auto logits = torch::matmul(q, p.t());
  double want = 0;
  for (int64_t i = 0; i < 5; ++i)
    want += (torch::logsumexp(logits[i], 0) - logits[i][i * 3]).item<double>();
  want /= 5;
  CATCH_CHECK(gc::loss(q, p, {}, cfg).item<double>() == Approx(want).epsilon(1e-14));
  cfg.anchor_chunk = 2;
  CATCH_CHECK(gc::loss(q, p, {}, cfg).item<double>() == Approx(want).epsilon(1e-14));
}

CATCH_TEST_CASE("loss: supervised contrastive matches a hand computation", "[gradcache]") {
  // Four points, labels {0, 0, 1, 1}, dot similarity, temperature 1.
  auto z = torch::tensor({{1.0, 0.0}, {0.8, 0.6}, {0.0, 1.0}, {-0.6, 0.8}}, torch::kFloat64);
  auto labels = torch::tensor({0, 0, 1, 1}, torch::kLong);
  gc::LossConfig cfg;
  cfg.kind = gc::LossKind::supcon;
  cfg.similarity = gc::Similarity::dot;
  cfg.temperature = 1.0;
  // Anchor i: -log(exp(s_ip) / sum_{a != i} exp(s_ia)) with p its one positive; mean over anchors.
  double s[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) s[i][j] = (z[i] * z[j]).sum().item<double>();
  int pos[4] = {1, 0, 3, 2};
  double want = 0;
  for (int i = 0; i < 4; ++i) {
    double denom = 0;
    for (int a = 0; a < 4; ++a)
      if (a != i) denom += std::exp(s[i][a]);
    want += -(s[i][pos[i]] - std::log(denom));
  }
  want /= 4;
  CATCH_CHECK(gc::loss(z, {}, labels, cfg).item<double>() == Approx(want).epsilon(1e-14));
}

CATCH_TEST_CASE("loss: sides of different widths are refused", "[gradcache]") {
  gc::LossConfig cfg;
  CATCH_CHECK_THROWS_WITH(gc::loss(torch::zeros({2, 3}), torch::zeros({2, 4}), {}, cfg),
                          "loss: query and passage representations differ in width (3 vs 4)");
}
