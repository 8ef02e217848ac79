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

namespace traincache::gc {

/// Similarity between representations.
enum class Similarity { cos, dot };

/// Which loss.
enum class LossKind {
  infonce,    ///< query i against all passages (in-batch + hard negatives), target = its positive
  symmetric,  ///< infonce plus positives against all queries, averaged
  supcon,     ///< supervised contrastive over one side with labels (grouped mode)
};

/// Loss settings.
struct LossConfig {
  LossKind kind = LossKind::infonce;
  Similarity similarity = Similarity::cos;
  double temperature = 0.05;
  int64_t anchor_chunk = 0;  ///< anchor rows per loss chunk (0 = all at once)
};

/// Parses "cos"/"dot"; throws Error(usage).
Similarity parse_similarity(const std::string& s);

/// The loss as a differentiable tensor. Pair modes: q [B, d]; p [B*(1+k), d] grouped per query
/// (row i*(1+k) is query i's positive, the next k rows its hard negatives). supcon: q = z [B, d],
/// labels [B], p unused. Computed in anchor chunks, but the graph of every chunk is kept.
torch::Tensor loss(const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& labels,
                   const LossConfig& cfg);

/// Computes the loss on leaf tensors q and p (requires_grad) one anchor chunk at a time,
/// back-propagating each chunk at once, so that at most anchor_chunk x |candidates| logits exist.
/// Leaves d(loss)/dq in q.grad() and d(loss)/dp in p.grad(); returns the loss value.
double loss_with_rep_grads(torch::Tensor& q, torch::Tensor& p, const torch::Tensor& labels,
                           const LossConfig& cfg);

/// A trainable encoder: maps input tensors (row-aligned, one chunk) to representations [rows, d].
using Tower = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

/// Rows [a, b) of every input.
std::vector<torch::Tensor> slice_rows(const std::vector<torch::Tensor>& inputs, int64_t a, int64_t b);

/// How a step treats randomness and graphs; the defaults are the correct Gradient Cache.
struct StepMode {
  bool gradcache = true;        ///< false: the plain full-batch step (the reference)
  bool keep_chunk_graphs = false;  ///< reference for dropout: chunked forward keeping every graph
  bool restore_rng = true;      ///< negative control only: false replays with fresh randomness
};

/// One side of a batch: its tower, inputs (each [rows, ...]) and chunk size (0 = one chunk).
struct SideBatch {
  Tower tower;
  std::vector<torch::Tensor> inputs;
  int64_t chunk = 0;
  int64_t rows() const { return inputs.empty() ? 0 : inputs.front().size(0); }
};

/// Runs forward + backward for one batch, leaving parameter gradients in .grad() (accumulated:
/// zero them first). `passage` is ignored for supcon. Returns the loss value.
double step(SideBatch& query, SideBatch& passage, const torch::Tensor& labels, const LossConfig& cfg,
            const StepMode& mode = {});

}  // namespace traincache::gc
