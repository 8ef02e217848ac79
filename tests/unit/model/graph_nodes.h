// The torch unit tests' look at a module's graph. Needs LibTorch.
#pragma once

#include <torch/script.h>

namespace traincache::testing {

/// How many nodes of `kind` ("aten::linear") the top block of m's forward graph holds.
inline int nodes_of(const torch::jit::Module& m, const char* kind) {
  int n = 0;
  for (torch::jit::Node* node : m.get_method("forward").graph()->nodes())
    n += node->kind() == c10::Symbol::fromQualString(kind) ? 1 : 0;
  return n;
}

}  // namespace traincache::testing
