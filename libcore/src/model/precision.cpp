#include "traincache/model/precision.h"

namespace traincache::model {

const Choices<Precision>& precision_choices() {
  static const Choices<Precision> c{{Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};
  return c;
}

}  // namespace traincache::model
