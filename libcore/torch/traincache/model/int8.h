// cache-fill --precision int8 (docs/models.md, "int8 on the CPU"): an encoder's linear layers
// converted at load to int8 weights, one scale per output channel, each layer one operator of ours
// over fbgemm's GEMM where LibTorch ships fbgemm's headers (int8_rows.h), else over LibTorch's
// quantized kernels (fbgemm, or oneDNN where LibTorch has no fbgemm). Needs LibTorch.
#pragma once

#include <torch/script.h>

#include <string>

#include "traincache/model/precision.h"

namespace traincache::model {

/// The int8 kernels for linear layers on this CPU: "fbgemm" where int8_rows.h's operator runs
/// (fbgemm's GEMM itself), else the quantized engine LibTorch offers: "x86" (fbgemm and oneDNN,
/// LibTorch 2.0 and later), "fbgemm" or "onednn"; "" when it has none of them.
std::string int8_engine();

/// Why this LibTorch cannot run --precision int8 ("" when it can): LibTorch 1.x (Debian 12's 1.13
/// has no fbgemm, and its oneDNN int8 layers gave MiniLM's rows outputs that moved with their batch
/// for 1.2x float32's speed), or, without int8_rows.h's operator, no int8 engine or no quantized
/// linear operators.
std::string int8_unavailable();
/// Error(unavailable, "--precision int8", int8_unavailable()) unless it is "".
void require_int8();

/// What int8_module converted.
struct Int8Conversion {
  int linears = 0;     ///< linear layers now in int8
  int left = 0;        ///< linear layers left in float32 (a weight that is not a constant float32 matrix)
  std::string engine;  ///< int8_engine()
};

/// A frozen copy of `module` (in eval mode) in which every linear layer whose weight is a constant
/// float32 matrix runs on int8 weights (each output row rounded at its largest magnitude /
/// weight_max: kInt8WeightMax for new caches, a cache's recorded value to verify it) and int8 inputs (each input row
/// rounded at its own largest magnitude, so that a row's output does not depend on its batch; oneDNN's kernels need two
/// columns or more for that), bias and output in float32; then optimised for inference. Selects the engine for the
/// process. require_int8's error when this LibTorch cannot; Error(data, subject) when the module has no linear layer to
/// convert, or weight_max is outside 1-127 (a damaged fingerprint's).
torch::jit::Module int8_module(const torch::jit::Module& module, const std::string& subject,
                               Int8Conversion* done = nullptr, int weight_max = kInt8WeightMax);

}  // namespace traincache::model
