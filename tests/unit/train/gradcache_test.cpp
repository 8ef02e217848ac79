#include "traincache/train/gradcache.h"

#include <ATen/CPUGeneratorImpl.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "catch.h"
#include "traincache/train/objectives.h"

using namespace traincache;

namespace {

// A two-layer tanh MLP as a TorchScript module, with optional dropout, seeded. The modules of one
// dropout rate are copies of one compiled module (the same TorchScript type: its method is compiled
// and optimised once for the whole binary, not once a module), each given this call's parameters.
torch::jit::Module mlp(uint64_t seed, double dropout, torch::Dtype dtype, int64_t in = 6, int64_t out = 4) {
  torch::manual_seed(seed);
  const auto w1 = torch::randn({8, in}, dtype) * 0.5;
  const auto b1 = torch::randn({8}, dtype) * 0.1;
  const auto w2 = torch::randn({out, 8}, dtype) * 0.5;
  static std::mutex mutex;
  static std::map<double, torch::jit::Module> compiled;
  torch::jit::Module m;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = compiled.find(dropout);
    if (it == compiled.end()) {
      torch::jit::Module c("Tower");
      c.register_attribute("training", c10::BoolType::get(), true);
      c.register_parameter("w1", w1, false);
      c.register_parameter("b1", b1, false);
      c.register_parameter("w2", w2, false);
      c.define(
          "def forward(self, x):\n"
          "  h = torch.tanh(torch.matmul(x, self.w1.t()) + self.b1)\n"
          "  h = torch.dropout(h, " +
          std::to_string(dropout) +
          ", self.training)\n"
          "  return torch.matmul(h, self.w2.t())\n");
      it = compiled.emplace(dropout, c).first;
    }
    m = it->second.deepcopy();
  }
  m.setattr("w1", w1.clone());
  m.setattr("b1", b1.clone());
  m.setattr("w2", w2.clone());
  for (auto p : m.parameters()) p.set_requires_grad(true);
  m.train();
  return m;
}

train::Tower tower(torch::jit::Module& m) {
  return [&m](const std::vector<torch::Tensor>& in) {
    return m.forward(std::vector<torch::jit::IValue>(in.begin(), in.end())).toTensor();
  };
}

struct Setup {
  bool tied = true;
  uint64_t classifier_seed = 5;  // classifier kinds: the seed of the class weights
  int64_t k = 0;                 // hard negatives
  train::LossConfig loss;
  int64_t batch = 10, qchunk = 3, pchunk = 4;
  double dropout = 0;
  std::vector<int64_t> qlengths, plengths;  // chunks by length (text sides); empty: in order
  int64_t max_tokens = 0;
};

// The loss of s with, for the classifier kinds, a classifier of 3 classes over the 4-wide
// representations (seeded, so every call and rank starts alike); its tensors join `params`.
train::LossConfig loss_with_classifier(const Setup& s, torch::Dtype dtype, std::vector<torch::Tensor>& params) {
  train::LossConfig cfg = s.loss;
  if (!train::is_classifier(cfg.kind)) return cfg;
  torch::manual_seed(s.classifier_seed);
  cfg.class_weight = torch::randn({3, 4}, dtype).requires_grad_(true);
  params.push_back(cfg.class_weight);
  if (cfg.kind == train::LossKind::softmax) {
    cfg.class_bias = (torch::randn({3}, dtype) * 0.1).requires_grad_(true);
    params.push_back(cfg.class_bias);
  }
  return cfg;
}

// Runs `steps` SGD steps (lr 0.1) with the given mode; returns the parameters afterwards.
std::vector<torch::Tensor> train_steps(const Setup& s, const train::StepMode& mode, torch::Dtype dtype, int steps,
                                       torch::Tensor* rng_after = nullptr) {
  auto qm = mlp(1, s.dropout, dtype), pm = mlp(2, s.dropout, dtype);
  torch::jit::Module& pmod = s.tied ? qm : pm;
  std::vector<torch::Tensor> params;
  for (auto p : qm.parameters()) params.push_back(p);
  if (!s.tied)
    for (auto p : pm.parameters()) params.push_back(p);
  const train::LossConfig cfg = loss_with_classifier(s, dtype, params);
  torch::manual_seed(99);
  auto q_all = torch::randn({steps, s.batch, 6}, dtype);
  auto p_all = torch::randn({steps, s.batch * (1 + s.k), 6}, dtype);
  auto labels = torch::tensor({0, 1, 0, 2, 1, 1, 0, 2, 2, 0}, torch::kLong).slice(0, 0, s.batch);
  torch::manual_seed(7);  // the dropout stream
  for (int i = 0; i < steps; ++i) {
    for (auto& p : params)
      if (p.grad().defined()) p.grad().zero_();
    train::SideBatch qb{tower(qm), {q_all[i]}, s.qchunk};
    train::SideBatch pb{tower(pmod), {p_all[i]}, s.pchunk};
    qb.lengths = s.qlengths;
    pb.lengths = s.plengths;
    qb.max_tokens = pb.max_tokens = s.max_tokens;
    train::gradcache_step(qb, pb, labels, cfg, mode);
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
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, ((a[i] - b[i]).norm() / b[i].norm()).item<double>());
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
  sym.loss.kind = train::LossKind::symmetric;
  v.push_back({"symmetric loss", sym});
  Setup temp = base;
  temp.loss.similarity = train::Similarity::dot;
  temp.loss.temperature = 0.3;
  v.push_back({"dot similarity, temperature 0.3", temp});
  Setup sup = base;
  sup.loss.kind = train::LossKind::supcon;
  v.push_back({"supervised contrastive (grouped)", sup});
  Setup big = base;
  big.qchunk = 64;
  big.loss.anchor_chunk = 4;
  v.push_back({"chunk larger than the batch, loss in anchor chunks of 4", big});
  Setup by_length = neg;
  by_length.qlengths = {5, 1, 9, 3, 3, 7, 2, 8, 1, 4};
  for (int64_t i = 0; i < 30; ++i) by_length.plengths.push_back((i * 7) % 11 + 1);
  by_length.max_tokens = 10;
  v.push_back({"chunks by length: rows shortest first, at most 10 token slots", by_length});
  for (auto [kind, name, margin] : {std::tuple{train::LossKind::softmax, "softmax classifier", 0.0},
                                    std::tuple{train::LossKind::arcface, "ArcFace classifier", 0.5},
                                    std::tuple{train::LossKind::cosface, "CosFace classifier", 0.35},
                                    std::tuple{train::LossKind::triplet_batch_hard, "triplet, batch-hard", 0.2},
                                    std::tuple{train::LossKind::triplet_semi_hard, "triplet, semi-hard", 0.2}}) {
    Setup l = base;
    l.loss.kind = kind;
    l.loss.margin = margin;
    l.loss.scale = 4;
    l.loss.anchor_chunk = 3;
    v.push_back({name, l});
  }
  return v;
}

// The setup with a loss that gives other gradients: another temperature, margin, mining or
// classifier. (A triplet margin moves the gradient only where it switches terms on or off.)
Setup perturbed(Setup s) {
  if (train::is_triplet(s.loss.kind))
    s.loss.kind = s.loss.kind == train::LossKind::triplet_batch_hard ? train::LossKind::triplet_semi_hard
                                                                     : train::LossKind::triplet_batch_hard;
  else if (s.loss.kind == train::LossKind::arcface || s.loss.kind == train::LossKind::cosface)
    s.loss.margin += 0.3;
  else if (s.loss.kind == train::LossKind::softmax)
    s.classifier_seed += 1;
  else
    s.loss.temperature *= 2;
  return s;
}

}  // namespace

CATCH_TEST_CASE("gradient cache: SGD steps equal full-batch steps in float64 within 1e-12", "[gradcache]") {
  for (const auto& [name, s] : setups()) {
    CATCH_INFO(name);
    train::StepMode cached, full;
    full.gradcache = false;
    auto a = train_steps(s, cached, torch::kFloat64, 3);
    auto b = train_steps(s, full, torch::kFloat64, 3);
    CATCH_CHECK(max_abs_diff(a, b) <= 1e-12);
    // The check can fail: a different loss gives different parameters.
    CATCH_CHECK(max_abs_diff(train_steps(perturbed(s), cached, torch::kFloat64, 3), b) > 1e-6);
  }
}

CATCH_TEST_CASE("gradient cache: SGD steps equal full-batch steps in float32 within 1e-5 relative", "[gradcache]") {
  for (const auto& [name, s] : setups()) {
    CATCH_INFO(name);
    train::StepMode cached, full;
    full.gradcache = false;
    // 1e-5 relative, per parameter tensor (||a - b|| / ||b||): float32 sums in another order.
    CATCH_CHECK(max_rel_diff(train_steps(s, cached, torch::kFloat32, 3), train_steps(s, full, torch::kFloat32, 3)) <=
                1e-5);
  }
}

CATCH_TEST_CASE("gradient cache: with dropout the step equals a chunked step that keeps its graph", "[gradcache]") {
  for (bool by_length : {false, true}) {
    CATCH_INFO("chunks by length: " << by_length);
    Setup s;
    s.dropout = 0.3;
    s.tied = false;
    if (by_length) {  // chunks of rows taken shortest first, replayed as they were encoded
      s.qlengths = s.plengths = {5, 1, 9, 3, 3, 7, 2, 8, 1, 4};
      s.max_tokens = 10;
    }
    train::StepMode cached, chunked_graph, no_restore;
    chunked_graph.gradcache = false;
    chunked_graph.keep_chunk_graphs = true;
    no_restore.restore_rng = false;
    torch::Tensor rng_a, rng_b;
    auto a = train_steps(s, cached, torch::kFloat64, 3, &rng_a);
    auto b = train_steps(s, chunked_graph, torch::kFloat64, 3, &rng_b);
    CATCH_CHECK(max_abs_diff(a, b) <= 1e-12);
    // The global random state after the steps is as if every chunk had run once.
    CATCH_CHECK(torch::equal(rng_a, rng_b));
    // Negative control: replaying with fresh randomness gives other dropout masks.
    CATCH_CHECK(max_abs_diff(train_steps(s, no_restore, torch::kFloat64, 3), b) > 1e-6);
  }
}

CATCH_TEST_CASE("gradient cache: chunks by length hold the rows token_batches cuts, in order", "[gradcache]") {
  // Row i of the batch is the value i; the tower records each chunk's rows and returns them as
  // they came, so the step's representations are in the batch's order only if they are put back.
  std::vector<std::vector<int64_t>> seen;
  train::Tower record = [&seen](const std::vector<torch::Tensor>& in) {
    auto rows = in[0].select(1, 0).to(torch::kInt64).contiguous();
    seen.emplace_back(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel());
    return in[0];
  };
  auto x = torch::arange(10, torch::kFloat64).unsqueeze(1).repeat({1, 2}).requires_grad_(true);
  train::SideBatch qb{record, {x}, 3};
  qb.lengths = {5, 1, 9, 3, 3, 7, 2, 8, 1, 4};
  qb.max_tokens = 10;
  train::SideBatch pb{record, {x * 1}, 0};
  train::LossConfig cfg;
  cfg.similarity = train::Similarity::dot;
  cfg.temperature = 1;
  train::StepMode full;
  full.gradcache = false;
  full.keep_chunk_graphs = true;
  // Sorted by length (ties in row order): 1 8 | 6 3 4 ... cut at 3 rows and 10 slots (rows x the
  // chunk's longest): {1, 8, 6} (3 x 2), {3, 4} (2 x 3), {9, 0} (2 x 5), {5}, {7}, {2}.
  using V = std::vector<int64_t>;
  const std::vector<V> want{{1, 8, 6}, {3, 4}, {9, 0}, {5}, {7}, {2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  // With the identity tower and dot similarity, query i's positive (passage i) scores highest only
  // if both sides come back in the batch's order; the loss is then log-sum-exp minus x_i . x_i.
  auto logits = torch::matmul(x, x.t()).detach();
  const double expect = (torch::logsumexp(logits, 1) - logits.diagonal()).mean().item<double>();
  CATCH_CHECK(train::gradcache_step(qb, pb, {}, cfg, full) == Approx(expect).epsilon(1e-12));
  CATCH_CHECK(seen == want);
  // The plain full-batch step encodes each side whole.
  seen.clear();
  full.keep_chunk_graphs = false;
  train::gradcache_step(qb, pb, {}, cfg, full);
  CATCH_CHECK(seen == (std::vector<V>{want.back(), want.back()}));
}

CATCH_TEST_CASE("loss: dot similarity at temperature 1 is GradCache's SimpleContrastiveLoss", "[gradcache]") {
  torch::manual_seed(3);
  auto q = torch::randn({5, 4}, torch::kFloat64), p = torch::randn({15, 4}, torch::kFloat64);
  train::LossConfig cfg;
  cfg.similarity = train::Similarity::dot;
  cfg.temperature = 1.0;
  // SimpleContrastiveLoss: logits = q p^T, target = arange(B) * (|p| / |q|), mean cross-entropy.
  auto logits = torch::matmul(q, p.t());
  double want = 0;
  for (int64_t i = 0; i < 5; ++i) want += (torch::logsumexp(logits[i], 0) - logits[i][i * 3]).item<double>();
  want /= 5;
  CATCH_CHECK(train::batch_loss(q, p, {}, cfg).item<double>() == Approx(want).epsilon(1e-14));
  cfg.anchor_chunk = 2;
  CATCH_CHECK(train::batch_loss(q, p, {}, cfg).item<double>() == Approx(want).epsilon(1e-14));
}

CATCH_TEST_CASE("loss: supervised contrastive matches a hand computation", "[gradcache]") {
  // Four points, labels {0, 0, 1, 1}, dot similarity, temperature 1.
  auto z = torch::tensor({{1.0, 0.0}, {0.8, 0.6}, {0.0, 1.0}, {-0.6, 0.8}}, torch::kFloat64);
  auto labels = torch::tensor({0, 0, 1, 1}, torch::kLong);
  train::LossConfig cfg;
  cfg.kind = train::LossKind::supcon;
  cfg.similarity = train::Similarity::dot;
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
  CATCH_CHECK(train::batch_loss(z, {}, labels, cfg).item<double>() == Approx(want).epsilon(1e-14));
}

CATCH_TEST_CASE("loss: supervised contrastive averages over the anchors that have a positive", "[gradcache]") {
  // Labels {7, 3, 7, 5, 3, 9}: rows 3 and 5 are alone in their class and count in no term, and the
  // mean is over the four others (the count is made on the rows' device, unsorted labels).
  torch::manual_seed(8);
  auto z = torch::randn({6, 3}, torch::kFloat64);
  auto labels = torch::tensor({7, 3, 7, 5, 3, 9}, torch::kLong);
  train::LossConfig cfg;
  cfg.kind = train::LossKind::supcon;
  cfg.similarity = train::Similarity::dot;
  cfg.temperature = 1.0;
  const int pos[6] = {2, 4, 0, -1, 1, -1};
  double want = 0;
  for (int i = 0; i < 6; ++i) {
    if (pos[i] < 0) continue;
    double denom = 0;
    for (int a = 0; a < 6; ++a)
      if (a != i) denom += std::exp((z[i] * z[a]).sum().item<double>());
    want += -((z[i] * z[pos[i]]).sum().item<double>() - std::log(denom));
  }
  want /= 4;
  for (int64_t chunk : {0, 1, 4}) {
    CATCH_INFO("anchor chunk " << chunk);
    cfg.anchor_chunk = chunk;
    CATCH_CHECK(train::batch_loss(z, {}, labels, cfg).item<double>() == Approx(want).epsilon(1e-14));
    auto q = z.clone().requires_grad_(true), none = torch::Tensor();
    CATCH_CHECK(train::loss_with_rep_grads(q, none, labels, cfg).item<double>() == Approx(want).epsilon(1e-14));
  }
}

CATCH_TEST_CASE("loss: anchors per chunk: the given chunk, else 2^25 logits' worth", "[gradcache]") {
  train::LossConfig cfg;  // anchor_chunk 0
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 8192, 8192) == 4096);
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 5792, 5792) == 5792);  // 5792^2 < 2^25: all at once
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 5793, 5793) == 5792);
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 8192, 8 * 8192) == 512);      // a positive and 7 negatives each
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 10, int64_t{1} << 26) == 1);  // never none
  cfg.anchor_chunk = 16;
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 8192, 8192) == 16);
  CATCH_CHECK(train::loss_chunk_anchors(cfg, 10, 10) == 10);
}

namespace {

using Rows = std::vector<std::vector<double>>;

Rows rows_of(const torch::Tensor& t) {
  Rows out(static_cast<std::size_t>(t.size(0)));
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) out[static_cast<std::size_t>(i)].push_back(t[i][j].item<double>());
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  return dot(a, b) / std::sqrt(dot(a, a) * dot(b, b));
}

// Mean over rows of -log softmax(logits)[target], from plain loops.
double cross_entropy(const Rows& logits, const std::vector<int64_t>& y) {
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    double z = 0;
    for (double l : logits[i]) z += std::exp(l);
    total += std::log(z) - logits[i][static_cast<std::size_t>(y[i])];
  }
  return total / static_cast<double>(logits.size());
}

// The loss in anchor chunks of 1, 3 and all rows: one value whatever the chunking.
void check_loss(const torch::Tensor& z, const torch::Tensor& labels, train::LossConfig cfg, double want) {
  for (int64_t chunk : {0, 1, 3}) {
    CATCH_INFO("anchor chunk " << chunk);
    cfg.anchor_chunk = chunk;
    CATCH_CHECK(train::batch_loss(z, {}, labels, cfg).item<double>() == Approx(want).epsilon(1e-12));
  }
}

struct LabelledCase {
  torch::Tensor z, w, b, labels;
  std::vector<int64_t> y;
  Rows zr, wr;
};

LabelledCase labelled_case() {
  torch::manual_seed(11);
  LabelledCase c;
  c.z = torch::randn({7, 4}, torch::kFloat64);
  c.w = torch::randn({3, 4}, torch::kFloat64);
  c.b = torch::randn({3}, torch::kFloat64);
  c.y = {0, 2, 1, 0, 2, 2, 1};
  c.labels = torch::tensor(c.y, torch::kLong);
  c.zr = rows_of(c.z);
  c.wr = rows_of(c.w);
  return c;
}

}  // namespace

CATCH_TEST_CASE("loss: softmax classifier matches a hand computation", "[gradcache][objectives]") {
  auto c = labelled_case();
  train::LossConfig cfg;
  cfg.kind = train::LossKind::softmax;
  cfg.class_weight = c.w;
  cfg.class_bias = c.b;
  Rows logits;
  for (const auto& z : c.zr) {
    logits.emplace_back();
    for (int k = 0; k < 3; ++k) logits.back().push_back(dot(z, c.wr[k]) + c.b[k].item<double>());
  }
  check_loss(c.z, c.labels, cfg, cross_entropy(logits, c.y));
  // The prediction logits are the same W z + b.
  CATCH_CHECK(train::class_logits(c.z, cfg)[3][1].item<double>() == Approx(logits[3][1]).epsilon(1e-14));
}

CATCH_TEST_CASE("loss: ArcFace and CosFace match a hand computation", "[gradcache][objectives]") {
  auto c = labelled_case();
  for (auto kind : {train::LossKind::arcface, train::LossKind::cosface}) {
    for (double margin : {0.0, 0.5, 1.2}) {
      CATCH_INFO((kind == train::LossKind::arcface ? "ArcFace" : "CosFace") << " margin " << margin);
      train::LossConfig cfg;
      cfg.kind = kind;
      cfg.class_weight = c.w;
      cfg.margin = margin;
      cfg.scale = 8;
      Rows logits;
      for (std::size_t i = 0; i < c.zr.size(); ++i) {
        logits.emplace_back();
        for (std::size_t k = 0; k < 3; ++k) {
          double cs = cosine(c.zr[i], c.wr[k]);
          if (static_cast<int64_t>(k) == c.y[i]) {
            // ArcFace: cos(theta + m) while theta + m < pi, else cos(theta) - m sin(m).
            const double theta = std::acos(cs);
            if (kind == train::LossKind::cosface)
              cs -= margin;
            else
              cs = theta + margin < M_PI ? std::cos(theta + margin) : cs - margin * std::sin(margin);
          }
          logits.back().push_back(8 * cs);
        }
      }
      check_loss(c.z, c.labels, cfg, cross_entropy(logits, c.y));
    }
  }
}

CATCH_TEST_CASE("loss: triplet with batch-hard and semi-hard mining matches a hand computation",
                "[gradcache][objectives]") {
  auto c = labelled_case();
  c.y[6] = 3;  // a class of one row: an anchor without positives
  c.labels = torch::tensor(c.y, torch::kLong);
  const std::size_t n = c.zr.size();
  for (auto sim : {train::Similarity::cos, train::Similarity::dot}) {
    auto s = [&](std::size_t i, std::size_t j) {
      return sim == train::Similarity::cos ? cosine(c.zr[i], c.zr[j]) : dot(c.zr[i], c.zr[j]);
    };
    const double m = 0.3;
    double hard = 0, semi = 0;
    int hard_n = 0, semi_n = 0;
    for (std::size_t a = 0; a < n; ++a) {
      double hp = INFINITY, hn = -INFINITY;
      for (std::size_t j = 0; j < n; ++j) {
        if (j == a) continue;
        if (c.y[j] == c.y[a]) hp = std::min(hp, s(a, j));
        if (c.y[j] != c.y[a]) hn = std::max(hn, s(a, j));
      }
      if (std::isfinite(hp) && std::isfinite(hn)) {
        hard += std::max(0.0, hn - hp + m);
        ++hard_n;
      }
      for (std::size_t p = 0; p < n; ++p) {  // semi-hard: one term per (anchor, positive)
        if (p == a || c.y[p] != c.y[a]) continue;
        double below = -INFINITY, lowest = INFINITY;
        for (std::size_t j = 0; j < n; ++j) {
          if (c.y[j] == c.y[a]) continue;
          lowest = std::min(lowest, s(a, j));
          if (s(a, j) < s(a, p)) below = std::max(below, s(a, j));
        }
        semi += std::max(0.0, (std::isfinite(below) ? below : lowest) - s(a, p) + m);
        ++semi_n;
      }
    }
    CATCH_INFO((sim == train::Similarity::cos ? "cos" : "dot"));
    CATCH_REQUIRE(hard_n == 5);  // every anchor but rows 2 and 6, alone in their classes
    CATCH_REQUIRE(semi_n == 8);  // pairs: 2 (class 0) + 6 (class 2)
    train::LossConfig cfg;
    cfg.similarity = sim;
    cfg.margin = m;
    cfg.kind = train::LossKind::triplet_batch_hard;
    check_loss(c.z, c.labels, cfg, hard / hard_n);
    cfg.kind = train::LossKind::triplet_semi_hard;
    check_loss(c.z, c.labels, cfg, semi / semi_n);
  }
}

CATCH_TEST_CASE("loss: sides of different widths are refused", "[gradcache]") {
  train::LossConfig cfg;
  CATCH_CHECK_THROWS_WITH(train::batch_loss(torch::zeros({2, 3}), torch::zeros({2, 4}), {}, cfg),
                          "loss: query and passage representations differ in width (3 vs 4)");
}

namespace {

// W ranks as threads of this process, exchanging tensors through memory: the collectives of
// train::Parallel without a network, to check the data-parallel arithmetic for every loss.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), slots_(size) {}

  train::Parallel parallel(int rank, std::vector<int64_t> rows) {
    train::Parallel p;
    p.rank = rank;
    p.rows = std::move(rows);
    p.all_gather_rows = [this, rank](const torch::Tensor& t, const std::vector<int64_t>&) {
      return exchange(rank, {t}, [](const std::vector<std::vector<torch::Tensor>>& all) {
        std::vector<torch::Tensor> parts;
        for (const auto& s : all) parts.push_back(s[0]);
        return std::vector<torch::Tensor>{torch::cat(parts)};
      })[0];
    };
    p.all_reduce_sum = [this, rank](const std::vector<torch::Tensor>& ts) { sum(rank, ts); };
    return p;
  }

  void sum(int rank, const std::vector<torch::Tensor>& ts) {
    auto out = exchange(rank, ts, [](const std::vector<std::vector<torch::Tensor>>& all) {
      std::vector<torch::Tensor> total;
      for (std::size_t i = 0; i < all[0].size(); ++i) {
        auto t = all[0][i].clone();
        for (std::size_t r = 1; r < all.size(); ++r) t += all[r][i];
        total.push_back(t);
      }
      return total;
    });
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < ts.size(); ++i) ts[i].copy_(out[i]);
  }

 private:
  using Combine = std::function<std::vector<torch::Tensor>(const std::vector<std::vector<torch::Tensor>>&)>;

  // Every rank deposits its tensors; when all have, each computes the combination of all.
  std::vector<torch::Tensor> exchange(int rank, const std::vector<torch::Tensor>& mine, const Combine& combine) {
    std::vector<torch::Tensor> copy;
    for (const auto& t : mine) copy.push_back(t.detach().clone());
    std::unique_lock<std::mutex> lock(mutex_);
    // Wait until the previous exchange has been read by everyone.
    cv_.wait(lock, [&] { return leaving_ == 0; });
    slots_[rank] = copy;
    if (++arrived_ == size_) cv_.notify_all();
    cv_.wait(lock, [&] { return arrived_ == size_; });
    auto out = combine(slots_);
    if (++leaving_ == size_) {
      arrived_ = 0;
      leaving_ = 0;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return leaving_ == 0; });
    }
    return out;
  }

  int size_;
  std::vector<std::vector<torch::Tensor>> slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0, leaving_ = 0;
};

// `steps` SGD steps of Setup s on `world` ranks (threads), each with its own copy of the models
// and rank r's share of every batch; returns rank 0's parameters (every rank's are compared).
// `sum_rep_grads` false drops the representation-gradient sum (negative control).
std::vector<torch::Tensor> train_parallel(const Setup& s, int world, torch::Dtype dtype, int steps, bool gradcache,
                                          bool sum_rep_grads = true) {
  std::vector<torch::jit::Module> qms, pms;
  for (int r = 0; r < world; ++r) {
    qms.push_back(mlp(1, 0, dtype));
    pms.push_back(mlp(2, 0, dtype));
  }
  torch::manual_seed(99);
  auto q_all = torch::randn({steps, s.batch, 6}, dtype);
  auto p_all = torch::randn({steps, s.batch * (1 + s.k), 6}, dtype);
  auto labels = torch::tensor({0, 1, 0, 2, 1, 1, 0, 2, 2, 0}, torch::kLong).slice(0, 0, s.batch);
  std::vector<int64_t> rows;
  for (int r = 0; r < world; ++r) rows.push_back((r + 1) * s.batch / world - r * s.batch / world);
  ThreadGroup group(world);
  std::mutex seed_mutex;
  std::vector<std::vector<torch::Tensor>> result(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      torch::jit::Module& qm = qms[r];
      torch::jit::Module& pmod = s.tied ? qms[r] : pms[r];
      std::vector<torch::Tensor> params;
      for (auto p : qm.parameters()) params.push_back(p);
      if (!s.tied)
        for (auto p : pmod.parameters()) params.push_back(p);
      train::LossConfig cfg;
      {
        std::lock_guard<std::mutex> lock(seed_mutex);  // the classifier's seeded draw, one rank at a time
        cfg = loss_with_classifier(s, dtype, params);
      }
      auto par = group.parallel(r, rows);
      if (!sum_rep_grads) par.all_reduce_sum = [](const std::vector<torch::Tensor>&) {};
      const int64_t a = r * s.batch / world, b = (r + 1) * s.batch / world, g = 1 + s.k;
      train::StepMode mode;
      mode.gradcache = gradcache;
      for (int i = 0; i < steps; ++i) {
        for (auto& p : params)
          if (p.grad().defined()) p.grad().zero_();
        train::SideBatch qb{tower(qm), {q_all[i].slice(0, a, b)}, s.qchunk};
        train::SideBatch pb{tower(pmod), {p_all[i].slice(0, a * g, b * g)}, s.pchunk};
        train::gradcache_step(qb, pb, labels, cfg, mode, &par);
        std::vector<torch::Tensor> grads;
        for (auto& p : params) grads.push_back(p.grad());
        group.sum(r, grads);  // the caller's one all-reduce of parameter gradients
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.sub_(p.grad() * 0.1);
      }
      for (auto& p : params) result[r].push_back(p.detach().clone());
    });
  for (auto& t : threads) t.join();
  for (int r = 1; r < world; ++r) CATCH_CHECK(max_abs_diff(result[r], result[0]) == 0);
  return result[0];
}

}  // namespace

CATCH_TEST_CASE("data parallel: W ranks with B/W rows each equal one process with batch B (float64, 1e-12)",
                "[gradcache][parallel]") {
  for (const auto& [name, s] : setups()) {
    CATCH_INFO(name);
    train::StepMode full;
    full.gradcache = false;
    auto single = train_steps(s, full, torch::kFloat64, 3);
    for (int world : {2, 3}) {
      CATCH_INFO("world size " << world);
      CATCH_CHECK(max_abs_diff(train_parallel(s, world, torch::kFloat64, 3, true), single) <= 1e-12);
      CATCH_CHECK(max_abs_diff(train_parallel(s, world, torch::kFloat64, 3, false), single) <= 1e-12);
    }
  }
}

CATCH_TEST_CASE("data parallel: without summing representation gradients the result is wrong",
                "[gradcache][parallel]") {
  // Negative control: ranks that only back-propagate their own anchors' terms (the naive split,
  // which drops every other rank's anchors' gradient into this rank's rows) do not match.
  Setup s;
  train::StepMode full;
  full.gradcache = false;
  auto single = train_steps(s, full, torch::kFloat64, 3);
  CATCH_CHECK(max_abs_diff(train_parallel(s, 2, torch::kFloat64, 3, true, false), single) > 1e-6);
}
