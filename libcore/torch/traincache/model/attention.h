// Attention over short texts (docs/models.md, "Attention over short texts"): in an encoder's
// inference module on the CPU, each aten::scaled_dot_product_attention becomes
// traincache::attention, which runs a kernel of ours where the sequences are short and LibTorch's
// attention otherwise. LibTorch's CPU kernel (flash attention) works in blocks of 32 queries by 512
// keys, with a small matrix product per block: on a batch of 64 texts of 16 tokens that is 768
// heads' products of 16 x 16, mostly call overhead. Needs LibTorch.
#pragma once

#include <torch/script.h>

namespace traincache::model {

/// The longest sequence (queries and keys) traincache::attention runs its own kernel on.
inline constexpr int64_t kShortAttention = 48;

/// In a frozen graph, each aten::scaled_dot_product_attention of LibTorch 2.5's eight arguments
/// replaced by traincache::attention (the same arguments and result, float32 rounding apart; a
/// query whose keys are all masked out gives zeros, and a query's output is the same bits whatever
/// padding keys its batch adds, masked out). Returns the nodes
/// replaced: 0 with a LibTorch before 2.5, where the graph is left as it was. For inference only:
/// the operator has no gradient of its own.
int short_attention(torch::jit::Graph& graph);

}  // namespace traincache::model
