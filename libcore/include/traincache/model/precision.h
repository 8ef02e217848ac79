// The arithmetic precision an encoder or head runs in (gc-train and cache-fill --precision).
// Torch-free: the autocast region that applies it is in torch/traincache/model/precision_torch.h.
#pragma once

#include "traincache/base/choices.h"

namespace traincache {

namespace model {

/// fp32: float32 throughout. bf16, fp16: matrix products and convolutions in bfloat16 or float16
/// under autocast (parameters, losses and reductions stay float32).
enum class Precision { fp32, bf16, fp16 };

/// "fp32", "bf16", "fp16".
const Choices<Precision>& precision_choices();

}  // namespace model

using model::Precision;  // options and results name it as often as DType

}  // namespace traincache
