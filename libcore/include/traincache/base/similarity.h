// How two representations are compared: shared by the loss (gradcache.h), evaluation and the
// options of gc-train. Torch-free.
#pragma once

#include "traincache/base/choices.h"

namespace traincache {

/// cos: dot product of L2-normalised rows; dot: the plain dot product.
enum class Similarity { cos, dot };

/// "cos", "dot".
const Choices<Similarity>& similarity_choices();

}  // namespace traincache
