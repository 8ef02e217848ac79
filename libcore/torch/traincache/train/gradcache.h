// Gradient Cache (Gao et al. 2021): contrastive losses over batches far larger than activation
// memory allows, with parameter gradients equal to the full-batch ones. Needs LibTorch.
//
// One step: (1) encode each side chunk by chunk without a graph, saving the RNG state before each
// chunk; (2) compute the loss on the detached representations, in chunks of anchor rows, and
// back-propagate to them (the representation-gradient cache); (3) replay each chunk with a graph
// under its saved RNG state and back-propagate the cached gradients into the parameters; restore
// the RNG state that followed step (1).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "traincache/base/similarity.h"

namespace traincache::train {

using Similarity = traincache::Similarity;

/// Which loss.
enum class LossKind {
  infonce,             ///< query i against all passages (in-batch + hard negatives), target = its positive
  symmetric,           ///< infonce plus positives against all queries, averaged
  supcon,              ///< supervised contrastive over one side with labels (grouped mode)
  softmax,             ///< classification head: cross-entropy of W z + b against each row's class
  arcface,             ///< classification head with an additive angular margin (Deng et al. 2019)
  cosface,             ///< classification head with an additive cosine margin (Wang et al. 2018)
  triplet_batch_hard,  ///< triplet loss, hardest positive and negative per anchor (Hermans et al. 2017)
  triplet_semi_hard,   ///< triplet loss, semi-hard negative per (anchor, positive) (Schroff et al. 2015)
};

/// Pair modes: queries against passages. Every other kind is over one side with labels.
inline bool is_pairs(LossKind k) { return k == LossKind::infonce || k == LossKind::symmetric; }
/// The kinds with a trainable classifier (LossConfig::class_weight).
inline bool is_classifier(LossKind k) {
  return k == LossKind::softmax || k == LossKind::arcface || k == LossKind::cosface;
}
inline bool is_triplet(LossKind k) { return k == LossKind::triplet_batch_hard || k == LossKind::triplet_semi_hard; }

/// Loss settings.
struct LossConfig {
  LossKind kind = LossKind::infonce;
  Similarity similarity = Similarity::cos;
  double temperature = 0.05;      ///< infonce, symmetric, supcon
  double margin = 0, scale = 64;  ///< arcface (radians), cosface, triplet (margin only)
  int64_t anchor_chunk = 0;       ///< anchor rows per loss chunk (0 = as many as 2^25 logits allow)
  double grad_scale = 1;          ///< float16 training: the loss is back-propagated times this
  /// Classifier kinds: the class weights [C, d] (and bias [C], softmax) as trained parameters;
  /// their gradients accumulate in .grad() like the encoders'.
  torch::Tensor class_weight, class_bias;
};

/// The loss as a differentiable tensor. Pair modes: q [B, d]; p [B*(1+k), d] grouped per query
/// (row i*(1+k) is query i's positive, the next k rows its hard negatives). Labelled kinds: q = z
/// [B, d], labels [B] (0-based classes for the classifier kinds), p unused. Computed in anchor chunks, but the graph of
/// every chunk is kept.
torch::Tensor batch_loss(const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& labels,
                         const LossConfig& cfg);

/// Anchor rows per loss chunk for `anchors` anchors scored against `candidates` rows (or classes):
/// cfg.anchor_chunk, or, when it is 0, as many as keep a chunk's logits within 2^25 values (128 MiB
/// in float32; the chunk's other temporaries are about as large): few chunks, few kernel launches,
/// a bounded peak. Never more than `anchors`, never less than 1.
int64_t loss_chunk_anchors(const LossConfig& cfg, int64_t anchors, int64_t candidates);

/// Computes the loss on leaf tensors q and p (requires_grad) one anchor chunk at a time,
/// back-propagating each chunk at once, so that at most anchor_chunk x |candidates| logits exist.
/// Leaves d(loss)/dq in q.grad() and d(loss)/dp in p.grad(); returns the loss value as a 0-dim
/// float64 tensor on their device, never read back here (the caller reads it once its work is queued).
/// With an anchor range [anchor_begin, anchor_end), only those anchors' terms are computed (the
/// loss is their sum over the same denominator): ranks that split the anchors and sum the results
/// get the whole loss and its gradients.
torch::Tensor loss_with_rep_grads(torch::Tensor& q, torch::Tensor& p, const torch::Tensor& labels,
                                  const LossConfig& cfg, int64_t anchor_begin = 0, int64_t anchor_end = -1);

/// A trainable encoder: maps input tensors (row-aligned, one chunk) to representations [rows, d].
using Tower = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

/// How a step treats randomness and graphs; the defaults are the correct Gradient Cache.
struct StepMode {
  bool gradcache = true;           ///< false: the plain full-batch step (the reference)
  bool keep_chunk_graphs = false;  ///< reference for dropout: chunked forward keeping every graph
  bool restore_rng = true;         ///< negative control only: false replays with fresh randomness
};

/// One side of a batch: its tower, inputs (each [rows, ...]) and chunk size (0 = one chunk).
struct SideBatch {
  Tower tower;
  std::vector<torch::Tensor> inputs;
  int64_t chunk = 0;
  /// Where the tower runs: its generator (a CUDA device's) is saved and replayed with the CPU one.
  c10::Device device{c10::kCPU};
  /// Text trimmed per chunk: each row's tokens. Given, chunks hold rows of like length: the rows
  /// are taken shortest first and cut as text::token_batches cuts them (at most `chunk` rows and,
  /// unless alone, `max_tokens` token slots; 0: no cap). The representations, their gradients and
  /// the loss stay in the batch's order, so only the order of summation changes.
  std::vector<int64_t> lengths{};
  int64_t max_tokens = 0;
  int64_t rows() const { return inputs.empty() ? 0 : inputs.front().size(0); }
};

/// Data parallelism: this process holds one rank's share of the global batch (consecutive rows;
/// rank r's queries are rows [sum(rows[0..r)), +rows[r]) of the batch, its passages the matching
/// groups) and exchanges representations with the others through two collectives.
struct Parallel {
  int rank = 0;
  std::vector<int64_t> rows;  ///< query rows of every rank's share
  /// Every rank's rows of `local`, concatenated in rank order (row counts given).
  std::function<torch::Tensor(const torch::Tensor& local, const std::vector<int64_t>& rows)> all_gather_rows;
  /// In-place sum over ranks of every tensor (one collective).
  std::function<void(const std::vector<torch::Tensor>&)> all_reduce_sum;
};

/// Runs forward + backward for one batch, leaving parameter gradients in .grad() (accumulated:
/// zero them first). `passage` is ignored by the labelled kinds. Returns the loss value.
///
/// With `par`, the sides hold this rank's share and `labels` the whole batch's (supcon). Each rank
/// encodes its share, the representations are all-gathered so that every rank's rows are
/// candidates for every anchor, each rank computes the loss terms of its own anchors, and the
/// representation gradients are summed over ranks; each rank then back-propagates the rows it
/// encoded. The parameter gradients left here are this rank's part: their sum over ranks (one
/// all-reduce, by the caller) is the single-process gradient of the whole batch. Returns the
/// whole batch's loss.
double gradcache_step(SideBatch& query, SideBatch& passage, const torch::Tensor& labels, const LossConfig& cfg,
                      const StepMode& mode = {}, const Parallel* par = nullptr);

}  // namespace traincache::train
