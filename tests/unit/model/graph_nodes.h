// The torch unit tests' small modules and their look at a module's graph. Needs LibTorch.
#pragma once

#include <torch/script.h>

#include <string>

namespace traincache::testing {

/// How many nodes of `kind` ("aten::linear") the top block of m's forward graph holds.
inline int nodes_of(const torch::jit::Module& m, const char* kind) {
  int n = 0;
  for (torch::jit::Node* node : m.get_method("forward").graph()->nodes())
    n += node->kind() == c10::Symbol::fromQualString(kind) ? 1 : 0;
  return n;
}

/// A module of two linear layers (32 -> 64 -> 16, the first with a bias) with `activation`
/// ("gelu", "tanh") between them, its weights from the current seed, in eval mode.
inline torch::jit::Module two_linear_module(const std::string& activation) {
  torch::jit::Module m("M");
  m.register_parameter("w1", torch::randn({64, 32}) / 6, false);
  m.register_parameter("b1", torch::randn({64}), false);
  m.register_parameter("w2", torch::randn({16, 64}) / 8, false);
  m.define("def forward(self, x):\n  h = torch." + activation +
           "(torch.linear(x, self.w1, self.b1))\n  return torch.linear(h, self.w2)\n");
  m.eval();
  return m;
}

}  // namespace traincache::testing
