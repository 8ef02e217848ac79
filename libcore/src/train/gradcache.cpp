#include "traincache/train/gradcache.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "traincache/base/error.h"
#include "traincache/text/token_batches.h"
#include "traincache/train/objectives.h"

namespace traincache::train {

namespace {

// The rows a loss compares: normalised for cosine similarity. The classifier kinds take them as
// they are (ArcFace and CosFace normalise inside).
torch::Tensor prepare(const torch::Tensor& x, const LossConfig& cfg) {
  return cfg.similarity == Similarity::cos && !is_classifier(cfg.kind)
             ? torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(1).eps(1e-12))
             : x;
}

int64_t chunk_of(int64_t chunk, int64_t rows) { return chunk > 0 ? std::min(chunk, rows) : rows; }

// q's anchors are scored against p's rows (pairs), the classes (classifiers) or q's own rows.
int64_t anchors_per_chunk(const torch::Tensor& q, const torch::Tensor& p, const LossConfig& cfg) {
  const int64_t candidates = is_pairs(cfg.kind)        ? p.size(0)
                             : is_classifier(cfg.kind) ? cfg.class_weight.size(0)
                                                       : q.size(0);
  return loss_chunk_anchors(cfg, q.size(0), candidates);
}

// Sum over anchors [a, b) of the per-anchor loss, divided by the number of anchors that count;
// summing over all chunks gives the loss.
// What every chunk of one loss compares: the prepared queries and passages (the queries again in
// grouped modes), the labels, and what the chunks' sums are divided by.
struct Compared {
  const torch::Tensor& qn;
  const torch::Tensor& pn;
  const torch::Tensor& labels;
  const torch::Tensor& denom;
};

torch::Tensor chunk_loss(const Compared& x, const LossConfig& cfg, int64_t a, int64_t b) {
  const torch::Tensor &qn = x.qn, &pn = x.pn, &labels = x.labels, &denom = x.denom;
  const double inv_t = 1.0 / cfg.temperature;
  if (is_classifier(cfg.kind)) return classification_chunk(qn, labels, cfg, a, b, 1.0) / denom;
  if (is_triplet(cfg.kind)) return triplet_chunk(qn, labels, cfg, a, b, 1.0) / denom;
  if (cfg.kind == LossKind::supcon) {
    auto logits = torch::matmul(qn.slice(0, a, b), qn.t()) * inv_t;  // [c, B]
    auto rows = torch::arange(a, b, torch::TensorOptions().dtype(torch::kLong).device(qn.device()));
    auto self = torch::zeros_like(logits, torch::kBool);
    self.index_put_({torch::arange(b - a, rows.options()), rows}, true);
    logits = logits.masked_fill(self, -std::numeric_limits<double>::infinity());
    auto log_prob = logits - torch::logsumexp(logits, 1, true);
    auto pos = labels.slice(0, a, b).unsqueeze(1).eq(labels.unsqueeze(0)) & ~self;
    auto n_pos = pos.sum(1);
    auto per_anchor = -(log_prob.masked_fill(~pos, 0.0)).sum(1) / n_pos.clamp_min(1).to(log_prob.dtype());
    return per_anchor.masked_fill(n_pos.eq(0), 0.0).sum() / denom;
  }
  const int64_t group = pn.size(0) / qn.size(0);
  auto target = torch::arange(a, b, torch::TensorOptions().dtype(torch::kLong).device(qn.device())) * group;
  auto logits = torch::matmul(qn.slice(0, a, b), pn.t()) * inv_t;  // [c, B*group]
  auto l = torch::nn::functional::cross_entropy(
      logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  if (cfg.kind == LossKind::symmetric) {
    // Positives as anchors against every query.
    auto pos = pn.index_select(0, target);
    auto rows = torch::arange(a, b, target.options());
    auto back = torch::matmul(pos, qn.t()) * inv_t;  // [c, B]
    auto l2 = torch::nn::functional::cross_entropy(
        back, rows, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    l = (l + l2) * 0.5;
  }
  return l / denom;
}

// The number of anchors that count, as a 0-dim tensor beside the rows (exact: a count below 2^24).
// Labelled anchors are counted on the device without reading anything back, which would stop the
// host until the encode pass is done: each row's label is looked up in the sorted labels (O(B)
// memory, never a B x B mask; torch::unique would read its size back).
torch::Tensor denominator(const torch::Tensor& q, const torch::Tensor& labels, const LossConfig& cfg) {
  const auto opts = q.options().requires_grad(false);
  if (is_pairs(cfg.kind) || is_classifier(cfg.kind)) return torch::scalar_tensor(double(q.size(0)), opts);
  if (is_triplet(cfg.kind)) return triplet_denominator(labels, cfg).clamp_min(1).to(opts.dtype());
  auto flat = labels.reshape({-1});
  auto sorted = std::get<0>(flat.sort());
  auto same = torch::searchsorted(sorted, flat, false, true) - torch::searchsorted(sorted, flat);  // rows per label
  return same.gt(1).sum().clamp_min(1).to(opts.dtype());
}

void check_shapes(const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& labels, const LossConfig& cfg) {
  if (q.dim() != 2) throw Error(Exit::data, "loss", "representations must be [rows, dim]");
  if (!is_pairs(cfg.kind)) {
    if (!labels.defined() || labels.size(0) != q.size(0))
      throw Error(Exit::data, "loss", "a loss over labelled rows needs one label per row");
    if (is_classifier(cfg.kind) && (!cfg.class_weight.defined() || cfg.class_weight.size(1) != q.size(1)))
      throw Error(Exit::internal, "loss", "the classifier does not match the representations");
    return;
  }
  if (p.dim() != 2 || p.size(1) != q.size(1))
    throw Error(Exit::data, "loss",
                "query and passage representations differ in width (" + std::to_string(q.size(1)) + " vs " +
                    std::to_string(p.dim() == 2 ? p.size(1) : -1) + ")");
  if (p.size(0) % q.size(0) != 0)
    throw Error(Exit::data, "loss", "passages must be a whole number of groups per query");
}

}  // namespace

int64_t loss_chunk_anchors(const LossConfig& cfg, int64_t anchors, int64_t candidates) {
  if (cfg.anchor_chunk > 0) return chunk_of(cfg.anchor_chunk, anchors);
  constexpr int64_t kLogits = int64_t{1} << 25;
  return chunk_of(std::max<int64_t>(1, kLogits / std::max<int64_t>(1, candidates)), anchors);
}

torch::Tensor batch_loss(const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& labels,
                         const LossConfig& cfg) {
  check_shapes(q, p, labels, cfg);
  auto qn = prepare(q, cfg);
  auto pn = is_pairs(cfg.kind) ? prepare(p, cfg) : qn;
  const torch::Tensor denom = denominator(q, labels, cfg);
  const int64_t c = anchors_per_chunk(q, p, cfg);
  torch::Tensor total;
  const Compared compared{qn, pn, labels, denom};
  for (int64_t a = 0; a < q.size(0); a += c) {
    auto l = chunk_loss(compared, cfg, a, std::min(a + c, q.size(0)));
    total = total.defined() ? total + l : l;
  }
  return total;
}

torch::Tensor loss_with_rep_grads(torch::Tensor& q, torch::Tensor& p, const torch::Tensor& labels,
                                  const LossConfig& cfg, int64_t anchor_begin, int64_t anchor_end) {
  check_shapes(q, p, labels, cfg);
  const torch::Tensor denom = denominator(q, labels, cfg);
  const int64_t c = anchors_per_chunk(q, p, cfg);
  const int64_t end = anchor_end < 0 ? q.size(0) : std::min(anchor_end, q.size(0));
  const bool pairs = is_pairs(cfg.kind);
  // The compared rows once, as leaves of their own: each chunk's graph ends at them, and their
  // gradients go back through the normalisation once, after the last chunk.
  const torch::Tensor qn_graph = prepare(q, cfg), pn_graph = pairs ? prepare(p, cfg) : torch::Tensor();
  const bool own_leaves = qn_graph.unsafeGetTensorImpl() != q.unsafeGetTensorImpl();
  torch::Tensor qn = own_leaves ? qn_graph.detach().requires_grad_(true) : q;
  torch::Tensor pn = !pairs ? qn : own_leaves ? pn_graph.detach().requires_grad_(true) : p;
  // The value stays on the device: reading it here would stop the host until the device is done.
  torch::Tensor value = torch::zeros({}, q.options().dtype(torch::kFloat64).requires_grad(false));
  const Compared compared{qn, pn, labels, denom};
  for (int64_t a = anchor_begin; a < end; a += c) {
    auto l = chunk_loss(compared, cfg, a, std::min(a + c, end));
    value += l.detach().to(torch::kFloat64);
    (cfg.grad_scale == 1 ? l : l * cfg.grad_scale).backward();
  }
  if (own_leaves) {
    std::vector<torch::Tensor> outs, grads;
    for (auto [graph, leaf] : {std::pair{qn_graph, qn}, std::pair{pn_graph, pn}})
      if (graph.defined() && leaf.grad().defined()) {
        outs.push_back(graph);
        grads.push_back(leaf.grad());
      }
    if (!outs.empty()) torch::autograd::backward(outs, grads);
  }
  return value;
}

namespace {

// The default generators' states: the CPU one, and the CUDA device's when the tower runs on one
// (dropout draws from the generator of the device it runs on). Only the device in use: asking every
// CUDA device for its generator would start CUDA in a CPU run on a machine with a GPU.
struct RngState {
  std::vector<torch::Tensor> states;
};

std::vector<at::Generator> generators(const c10::Device& device) {
  std::vector<at::Generator> gens{at::detail::getDefaultCPUGenerator()};
  if (device.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(device));
  return gens;
}

RngState save_rng(const c10::Device& device) {
  RngState s;
  for (auto& gen : generators(device)) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.states.push_back(gen.get_state());
  }
  return s;
}

void restore_rng(const RngState& s, const c10::Device& device) {
  auto gens = generators(device);
  for (std::size_t i = 0; i < gens.size() && i < s.states.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(s.states[i]);
  }
}

// A side's chunks: which rows each holds, in the order they are encoded.
struct Chunks {
  torch::Tensor order;        // int64 (CPU): the rows in encoding order; undefined: the batch's own
  torch::Tensor inverse;      // where each row of the batch is in `order`
  std::vector<int64_t> ends;  // where each chunk ends in that order (exclusive)

  int64_t begin(std::size_t k) const { return k == 0 ? 0 : ends[k - 1]; }
  // Rows [begin(k), ends[k]) of `t` in encoding order.
  torch::Tensor rows(const torch::Tensor& t, std::size_t k) const {
    if (!order.defined()) return t.slice(0, begin(k), ends[k]);
    return t.index_select(0, order.slice(0, begin(k), ends[k]).to(t.device()));
  }
  std::vector<torch::Tensor> inputs(const SideBatch& side, std::size_t k) const {
    std::vector<torch::Tensor> out;
    for (const auto& t : side.inputs) out.push_back(rows(t, k));
    return out;
  }
  // The chunks' representations, concatenated in encoding order, back in the batch's order.
  torch::Tensor in_batch_order(std::vector<torch::Tensor> reps) const {
    auto all = reps.size() == 1 ? reps.front() : torch::cat(reps);
    return order.defined() ? all.index_select(0, inverse.to(all.device())) : all;
  }
};

// One chunk of the whole side, or chunks of side.chunk rows; with side.lengths, the rows shortest
// first, cut by text::token_batches.
Chunks plan_chunks(const SideBatch& side, bool chunked) {
  Chunks c;
  const int64_t n = side.rows();
  const int64_t rows = chunked ? chunk_of(side.chunk, n) : n;
  if (!chunked || side.lengths.empty()) {
    for (int64_t a = 0; a < n; a += rows) c.ends.push_back(std::min(a + rows, n));
    return c;
  }
  if (static_cast<int64_t>(side.lengths.size()) != n)
    throw Error(Exit::internal, "step", "a side's token counts do not match its rows");
  text::LengthBatches lb = text::length_batches(side.lengths, rows, side.max_tokens);
  c.ends = std::move(lb.ends);
  c.order = torch::tensor(lb.order, torch::kInt64);
  c.inverse = torch::empty_like(c.order);
  c.inverse.index_put_({c.order}, torch::arange(n, torch::kInt64));
  return c;
}

// Pass 1: representations of every chunk, without a graph.
torch::Tensor encode_no_grad(SideBatch& side, std::vector<RngState>& states) {
  torch::NoGradGuard no_grad;
  const Chunks chunks = plan_chunks(side, true);
  std::vector<torch::Tensor> reps;
  for (std::size_t k = 0; k < chunks.ends.size(); ++k) {
    states.push_back(save_rng(side.device));
    std::vector<torch::Tensor> in;
    // Clones: a model that modifies its input in place cannot change what the replay sees.
    for (auto& t : chunks.inputs(side, k)) in.push_back(t.clone());
    reps.push_back(side.tower(in));
  }
  return chunks.in_batch_order(std::move(reps));
}

// Pass 3: replay every chunk with a graph and push the cached gradients into the parameters.
void replay(SideBatch& side, const std::vector<RngState>& states, const torch::Tensor& grads, bool restore) {
  const Chunks chunks = plan_chunks(side, true);
  for (std::size_t k = 0; k < chunks.ends.size(); ++k) {
    if (restore) restore_rng(states[k], side.device);
    auto rep = side.tower(chunks.inputs(side, k));
    rep.backward(chunks.rows(grads, k));
  }
}

torch::Tensor encode_with_graph(SideBatch& side, bool chunked) {
  const Chunks chunks = plan_chunks(side, chunked);
  std::vector<torch::Tensor> reps;
  for (std::size_t k = 0; k < chunks.ends.size(); ++k) reps.push_back(side.tower(chunks.inputs(side, k)));
  return chunks.in_batch_order(std::move(reps));
}

// The data-parallel step (see Parallel in gradcache.h).
double parallel_step(SideBatch& query, SideBatch& passage, const torch::Tensor& labels, const LossConfig& cfg,
                     const StepMode& mode, const Parallel& par) {
  const bool pairs = is_pairs(cfg.kind);
  const int64_t n = query.rows();
  if (par.rank < 0 || par.rank >= static_cast<int>(par.rows.size()) || par.rows[par.rank] != n || n == 0)
    throw Error(Exit::internal, "step", "this rank's share does not match the batch split");
  const int64_t group = pairs ? passage.rows() / n : 0;  // passages per query: positive + hard negatives
  // 1. This rank's representations: without a graph (gradient cache) or keeping it (plain step).
  std::vector<RngState> q_states, p_states;
  torch::Tensor q_graph, p_graph, q_loc, p_loc;
  if (mode.gradcache) {
    q_loc = encode_no_grad(query, q_states);
    if (pairs) p_loc = encode_no_grad(passage, p_states);
  } else {
    q_graph = encode_with_graph(query, mode.keep_chunk_graphs);
    q_loc = q_graph.detach();
    if (pairs) {
      p_graph = encode_with_graph(passage, mode.keep_chunk_graphs);
      p_loc = p_graph.detach();
    }
  }
  RngState after = save_rng(query.device);
  // 2. One all-gather: every rank sends its queries followed by its passages.
  std::vector<int64_t> sent;
  for (int64_t r : par.rows) sent.push_back(r * (1 + group));
  auto all = par.all_gather_rows(pairs ? torch::cat({q_loc, p_loc}) : q_loc, sent);
  std::vector<torch::Tensor> qs, ps;
  const int64_t offset = std::accumulate(par.rows.begin(), par.rows.begin() + par.rank, int64_t{0});
  int64_t at = 0;
  for (std::size_t r = 0; r < par.rows.size(); ++r) {
    qs.push_back(all.slice(0, at, at + par.rows[r]));
    at += par.rows[r];
    if (pairs) {
      ps.push_back(all.slice(0, at, at + par.rows[r] * group));
      at += par.rows[r] * group;
    }
  }
  auto q = torch::cat(qs).detach().requires_grad_(true);
  auto p = pairs ? torch::cat(ps).detach().requires_grad_(true) : torch::Tensor();
  // 3. This rank's anchors' loss terms against every rank's candidates; the representation
  // gradients and the loss are summed over ranks in one all-reduce.
  torch::Tensor value = loss_with_rep_grads(q, p, labels, cfg, offset, offset + n);
  auto gq = q.grad().defined() ? q.grad() : torch::zeros_like(q);
  std::vector<torch::Tensor> reduced{gq};
  torch::Tensor gp;
  if (pairs) reduced.push_back(gp = p.grad().defined() ? p.grad() : torch::zeros_like(p));
  auto total = value.to(gq.options()).reshape({1});
  reduced.push_back(total);
  par.all_reduce_sum(reduced);
  // 4. Back-propagate the rows this rank encoded.
  auto gq_own = gq.slice(0, offset, offset + n);
  auto gp_own = pairs ? gp.slice(0, offset * group, (offset + n) * group) : torch::Tensor();
  if (mode.gradcache) {
    replay(query, q_states, gq_own, mode.restore_rng);
    if (pairs) replay(passage, p_states, gp_own, mode.restore_rng);
    if (mode.restore_rng) restore_rng(after, query.device);
  } else if (pairs) {
    torch::autograd::backward({q_graph, p_graph}, {gq_own, gp_own});
  } else {
    q_graph.backward(gq_own);
  }
  return total.item<double>();
}

}  // namespace

double gradcache_step(SideBatch& query, SideBatch& passage, const torch::Tensor& labels, const LossConfig& cfg,
                      const StepMode& mode, const Parallel* par) {
  if (par) return parallel_step(query, passage, labels, cfg, mode, *par);
  const bool pairs = is_pairs(cfg.kind);
  if (!mode.gradcache) {
    auto q = encode_with_graph(query, mode.keep_chunk_graphs);
    auto p = pairs ? encode_with_graph(passage, mode.keep_chunk_graphs) : torch::Tensor();
    auto l = batch_loss(q, p, labels, cfg);
    (cfg.grad_scale == 1 ? l : l * cfg.grad_scale).backward();
    return l.item<double>();
  }
  std::vector<RngState> q_states, p_states;
  auto q = encode_no_grad(query, q_states).detach().requires_grad_(true);
  auto p = pairs ? encode_no_grad(passage, p_states).detach().requires_grad_(true) : torch::Tensor();
  RngState after = save_rng(query.device);
  torch::Tensor value = loss_with_rep_grads(q, p, labels, cfg);
  replay(query, q_states, q.grad(), mode.restore_rng);
  if (pairs) replay(passage, p_states, p.grad(), mode.restore_rng);
  if (mode.restore_rng) restore_rng(after, query.device);
  return value.item<double>();  // read once the step's work is queued
}

}  // namespace traincache::train
