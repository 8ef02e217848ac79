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
#include <vector>

namespace traincache::model {

/// The operator's name in a graph: traincache::row_int8_linear(Tensor x, RowInt8Weight w) -> Tensor.
inline constexpr const char* kRowInt8Linear = "traincache::row_int8_linear";

/// traincache::row_int8_linears(Tensor x, RowInt8Weight w) -> Tensor[]: the layers of a joined
/// weight (row_int8_join) on the same input, its rows quantized once; an output per layer.
inline constexpr const char* kRowInt8Linears = "traincache::row_int8_linears";

/// Whether this build has the operator (fbgemm's headers at build time) and fbgemm runs on this
/// CPU (AVX2 or later). Registers the operator with LibTorch at the first call that says yes.
bool row_int8_available();

/// `weight` (a float32 matrix, out x in) with `bias` (float32, out, or none) in the operator's
/// form: each weight row rounded to int8 at its largest magnitude / 127 and packed for fbgemm, the
/// column sums and scales the output needs. An object a graph holds as a constant.
c10::IValue row_int8_weight(const at::Tensor& weight, const std::optional<at::Tensor>& bias);

/// The layers of `weights` (row_int8_weight's, of one input width) as one weight for
/// kRowInt8Linears, in that order.
c10::IValue row_int8_join(const std::vector<c10::IValue>& weights);

}  // namespace traincache::model
