// The row-quantized int8 linear layer of cache-fill --precision int8 in one operator
// (docs/models.md, "int8 on the CPU"): each input row rounded to 8 bits at its own largest
// magnitude, fbgemm's int8 GEMM on the weight packed once at load, and the output scaled back with
// its bias, in one pass over the rows per thread, where LibTorch's ATen ops take six (two
// reductions, a division, the quantizing kernel, the scaling back). Built where LibTorch ships
// fbgemm's headers (pip's wheels); elsewhere row_int8_available() is false and int8.cpp keeps
// LibTorch's operators. Needs LibTorch.
#pragma once

#include <torch/script.h>

#include <optional>
#include <string>
#include <vector>

#include "traincache/model/precision.h"

namespace traincache::model {

/// The operator's name in a graph: traincache::row_int8_linear(Tensor x, RowInt8Weight w) -> Tensor.
inline constexpr const char* kRowInt8Linear = "traincache::row_int8_linear";

/// traincache::row_int8_linears(Tensor x, RowInt8Weight w) -> Tensor[]: the layers of a joined
/// weight (row_int8_join) on the same input, its rows quantized once; an output per layer.
inline constexpr const char* kRowInt8Linears = "traincache::row_int8_linears";

/// traincache::row_int8_linear_norm(Tensor x, Tensor residual, RowInt8Weight w) -> Tensor: the
/// layer, the residual added and the layer norm of row_int8_norm, on each thread's rows in turn.
inline constexpr const char* kRowInt8LinearNorm = "traincache::row_int8_linear_norm";

/// Whether this build has the operator (fbgemm's headers at build time) and fbgemm runs on this
/// CPU (AVX2 or later). Registers the operator with LibTorch at the first call that says yes.
bool row_int8_available();

/// `weight` (a float32 matrix, out x in) with `bias` (float32, out, or none) in the operator's
/// form: each weight row rounded to int8 at its largest magnitude / weight_max (1-127;
/// kInt8WeightMax, precision.h, for new caches) and packed for fbgemm, the column sums and scales
/// the output needs. An object a graph holds as a constant. Where fbgemm's kernels would saturate
/// a pair of products (weight_max over 64 on a CPU without VNNI) the operator multiplies in two
/// parts, exact for twice the time.
c10::IValue row_int8_weight(const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            int weight_max = kInt8WeightMax);

/// The layers of `weights` (row_int8_weight's, of one input width) as one weight for
/// kRowInt8Linears, in that order.
c10::IValue row_int8_join(const std::vector<c10::IValue>& weights);

/// The one layer of `weight` followed by LibTorch's GELU (`approximate`: "none" or "tanh") on its
/// output, wherever the weight is used.
void row_int8_gelu(const c10::IValue& weight, const std::string& approximate);

/// The one layer of `weight` followed by a residual added and LibTorch's layer norm over its
/// outputs (`norm_weight`, `norm_bias`: float32, one per output; `eps`), for kRowInt8LinearNorm.
void row_int8_norm(const c10::IValue& weight, const at::Tensor& norm_weight, const at::Tensor& norm_bias, double eps);

}  // namespace traincache::model
