// Float32 linear layers on oneDNN (docs/models.md, "Float32 linear layers on oneDNN"): in an
// encoder's optimised module, each linear layer with constant weights runs oneDNN's linear
// operator on a weight laid out for it once at load, a GELU after it folded in, where LibTorch has
// that operator (LibTorch 2.x built with oneDNN). Needs LibTorch.
#pragma once

#include <torch/script.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace traincache::model {

/// The aten::linear nodes of `block` and of the blocks within it, in order.
void linear_nodes(torch::jit::Block* block, std::vector<torch::jit::Node*>& out);

/// The aten::gelu that is the only use of linear node n's output, with its approximation ("none"
/// or "tanh"), if there is one.
std::optional<std::pair<torch::jit::Node*, std::string>> gelu_after(torch::jit::Node* n);

/// Whether this LibTorch runs onednn_linears: it has mkldnn::_linear_pointwise and
/// mkldnn::_reorder_linear_weight and oneDNN enabled (LibTorch 2.x; not Debian 12's 1.13).
bool onednn_linears_available();

/// In a graph frozen by torch::jit::freeze, each aten::linear whose weight is a constant float32
/// CPU matrix and whose bias a constant float32 tensor or none, replaced by oneDNN's
/// (mkldnn::_linear_pointwise on the weight reordered once), and an aten::gelu that is its output's
/// only use folded into it. Returns the layers replaced; 0 where !onednn_linears_available().
int onednn_linears(torch::jit::Module& frozen);

}  // namespace traincache::model
