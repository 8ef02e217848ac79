// The arithmetic precision an encoder or head runs in (gc-train and cache-fill --precision).
// Torch-free: the autocast region that applies it is in torch/traincache/model/precision_torch.h.
#pragma once

#include <string>

#include "traincache/base/choices.h"

namespace traincache {

namespace model {

/// fp32: float32 throughout. bf16, fp16: matrix products and convolutions in bfloat16 or float16
/// under autocast (parameters, losses and reductions stay float32). int8 (cache-fill on a CPU
/// only): the linear layers' weights in int8, converted at load (model/int8.h).
enum class Precision { fp32, bf16, fp16, int8 };

/// int8's weights: each output row rounded to int8 steps of its largest magnitude / this, so at
/// most 64 steps either side of zero. Two input bytes (at most 255) times two such weights then sum
/// to at most 32,640: fbgemm's kernels on CPUs without VNNI, which add each pair of products in 16
/// bits (at most 32,767), stay exact in one product, where 127 needed two (docs/models.md). A
/// cache's fingerprint records it (options.int8_weight_max; io::cache::kInt8WeightMaxUnrecorded:
/// the range of int8 caches filled before it was recorded).
inline constexpr int kInt8WeightMax = 64;

/// "fp32", "bf16", "fp16", "int8": cache-fill's.
const Choices<Precision>& precision_choices();
/// "fp32", "bf16", "fp16": gc-train's (int8 weights take no gradient).
const Choices<Precision>& training_precision_choices();

/// Error(usage, option) when `p` cannot run on the device (`cuda`: a CUDA device): fp16 needs CUDA
/// (LibTorch's CPU autocast runs bfloat16 only), int8 a CPU (LibTorch's int8 linear kernels).
void check_precision(Precision p, bool cuda, const std::string& option);

/// What a --device text names, checked without LibTorch: "cpu" (or "cpu:0") or "cuda[:N]".
/// Error(usage, option, "expected cpu or cuda[:N], got 'SPEC'") for anything else, as
/// model::parse_device (which also checks that the CUDA device exists) says it.
struct DeviceSpec {
  bool cuda = false;
};
DeviceSpec parse_device_spec(const std::string& spec, const std::string& option = "--device");

}  // namespace model

using model::Precision;  // options and results name it as often as DType

}  // namespace traincache
