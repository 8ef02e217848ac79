#include "traincache/train/objectives.h"

#include <cmath>
#include <limits>

#include "traincache/base/error.h"

namespace traincache::train {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

torch::Tensor unit_rows(const torch::Tensor& x) {
  return torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(1).eps(1e-12));
}

// Cosines between rows of `z` [n, d] and class weights `w` [C, d].
torch::Tensor cosines(const torch::Tensor& z, const torch::Tensor& w) {
  return torch::matmul(unit_rows(z), unit_rows(w).t());
}

// The margin applied to the target class's cosine `ct` [n, 1].
torch::Tensor with_margin(const torch::Tensor& ct, const LossConfig& cfg) {
  const double m = cfg.margin;
  if (cfg.kind == LossKind::cosface) return ct - m;
  // ArcFace: cos(theta + m) = cos(theta) cos(m) - sin(theta) sin(m), while theta + m stays below pi;
  // beyond, cos(theta) - m sin(m) keeps the logit decreasing in theta (as InsightFace does).
  auto sin_t = torch::sqrt(torch::clamp_min(1.0 - ct * ct, 1e-12));
  auto phi = ct * std::cos(m) - sin_t * std::sin(m);
  return torch::where(ct > std::cos(M_PI - m), phi, ct - std::sin(M_PI - m) * m);
}

}  // namespace

torch::Tensor class_logits(const torch::Tensor& z, const LossConfig& cfg) {
  if (cfg.kind == LossKind::softmax) {
    auto logits = torch::matmul(z, cfg.class_weight.t());
    return cfg.class_bias.defined() ? logits + cfg.class_bias : logits;
  }
  return cosines(z, cfg.class_weight) * cfg.scale;
}

torch::Tensor classification_chunk(const torch::Tensor& z, const torch::Tensor& classes, const LossConfig& cfg,
                                   int64_t a, int64_t b, double denom) {
  auto zc = z.slice(0, a, b);
  auto y = classes.slice(0, a, b).to(z.device(), torch::kLong);
  torch::Tensor logits;
  if (cfg.kind == LossKind::softmax) {
    logits = class_logits(zc, cfg);
  } else {
    auto c = cosines(zc, cfg.class_weight);  // [rows, C]
    auto target = y.unsqueeze(1);
    logits = c.scatter(1, target, with_margin(c.gather(1, target), cfg)) * cfg.scale;
  }
  auto l = torch::nn::functional::cross_entropy(
      logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  return l / denom;
}

torch::Tensor triplet_chunk(const torch::Tensor& zn, const torch::Tensor& labels, const LossConfig& cfg, int64_t a,
                            int64_t b, double denom) {
  auto s = torch::matmul(zn.slice(0, a, b), zn.t());  // [rows, B]
  auto lab = labels.to(zn.device());
  auto same = lab.slice(0, a, b).unsqueeze(1).eq(lab.unsqueeze(0));
  auto self = torch::zeros_like(same);
  auto rows = torch::arange(b - a, torch::TensorOptions().dtype(torch::kLong).device(zn.device()));
  self.index_put_({rows, rows + a}, true);
  auto pos = same & ~self, neg = ~same;
  auto has_neg = neg.any(1);
  if (cfg.kind == LossKind::triplet_batch_hard) {
    auto hardest_pos = s.masked_fill(~pos, kInf).amin(1);   // least similar positive
    auto hardest_neg = s.masked_fill(~neg, -kInf).amax(1);  // most similar negative
    auto valid = pos.any(1) & has_neg;
    return torch::relu(hardest_neg - hardest_pos + cfg.margin).masked_fill(~valid, 0.0).sum() / denom;
  }
  // Semi-hard: for the pair (a, p), the negative sorted just below s(a, p); the least similar
  // negative when none is below. Sorting each anchor's negatives keeps memory at rows x B.
  auto sorted = std::get<0>(s.masked_fill(~neg, kInf).sort(1));
  auto below = torch::searchsorted(sorted, s.detach().contiguous());  // negatives with s(a,n) < s(a,p)
  auto chosen = sorted.gather(1, (below - 1).clamp_min(0));
  auto use = pos & has_neg.unsqueeze(1);
  return torch::relu(chosen - s + cfg.margin).masked_fill(~use, 0.0).sum() / denom;
}

torch::Tensor triplet_denominator(const torch::Tensor& labels, const LossConfig& cfg) {
  // On the labels' device, without reading anything back: rows per label by sort + searchsorted.
  const auto flat = labels.reshape({-1});
  const auto sorted = std::get<0>(flat.sort());
  const auto same = torch::searchsorted(sorted, flat, false, true) - torch::searchsorted(sorted, flat);
  const auto positives = same - 1, has_neg = (flat.size(0) - same).gt(0);
  if (cfg.kind == LossKind::triplet_batch_hard) return (positives.gt(0) & has_neg).sum();
  return positives.masked_fill(~has_neg, 0).sum();
}

torch::jit::Module make_classifier(LossKind kind, const std::vector<int64_t>& labels, int64_t dim, double scale,
                                   torch::Dtype dtype, torch::Device device) {
  if (!is_classifier(kind) || labels.empty() || dim <= 0)
    throw Error(Exit::internal, "classifier", "needs a classifier loss, classes and a width");
  const auto classes = static_cast<int64_t>(labels.size());
  const double bound = 1.0 / std::sqrt(static_cast<double>(dim));  // as nn.Linear initialises
  torch::jit::Module m("TraincacheClassifier");
  m.register_parameter("weight", torch::empty({classes, dim}).uniform_(-bound, bound), false);
  m.register_buffer("labels", torch::tensor(labels, torch::kLong));
  if (kind == LossKind::softmax) {
    m.register_parameter("bias", torch::empty({classes}).uniform_(-bound, bound), false);
    m.define("def forward(self, x):\n  return torch.matmul(x, self.weight.t()) + self.bias\n");
  } else {
    m.register_attribute("scale", c10::FloatType::get(), scale);
    m.define(
        "def forward(self, x):\n"
        "  xn = x / torch.clamp(torch.norm(x, 2, 1, True), min=1e-12)\n"
        "  wn = self.weight / torch.clamp(torch.norm(self.weight, 2, 1, True), min=1e-12)\n"
        "  return torch.matmul(xn, wn.t()) * self.scale\n");
  }
  m.to(device);
  m.to(dtype);
  for (auto p : m.parameters()) p.set_requires_grad(true);
  return m;
}

void use_classifier(LossConfig& cfg, torch::jit::Module& classifier) {
  cfg.class_weight = classifier.attr("weight").toTensor();
  cfg.class_bias = classifier.hasattr("bias") ? classifier.attr("bias").toTensor() : torch::Tensor();
}

}  // namespace traincache::train
