#include "traincache/model/precision.h"

#include <regex>

#include "traincache/base/error.h"

namespace traincache::model {

const Choices<Precision>& precision_choices() {
  static const Choices<Precision> c{
      {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}, {Precision::int8, "int8"}};
  return c;
}

const Choices<Precision>& training_precision_choices() {
  static const Choices<Precision> c{{Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};
  return c;
}

void check_precision(Precision p, bool cuda, const std::string& option) {
  if (p == Precision::fp16 && !cuda)
    throw Error(Exit::usage, option,
                "fp16 needs a CUDA device (LibTorch's CPU autocast runs bfloat16 only); use bf16 on the CPU");
  if (p == Precision::int8 && cuda)
    throw Error(Exit::usage, option, "int8 runs on the CPU (LibTorch's int8 linear kernels); use bf16 or fp16 on CUDA");
}

DeviceSpec parse_device_spec(const std::string& spec, const std::string& option) {
  // LibTorch's own grammar for these two types: no sign, no leading zero; a CPU has index 0 only.
  static const std::regex cpu("cpu(:0)?"), cuda("cuda(:(0|[1-9][0-9]*))?");
  if (std::regex_match(spec, cpu)) return {false};
  if (std::regex_match(spec, cuda)) return {true};
  throw Error(Exit::usage, option, "expected cpu or cuda[:N], got '" + spec + "'");
}

}  // namespace traincache::model
