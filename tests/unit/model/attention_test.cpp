#include "traincache/model/attention.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>

#include <limits>

#include "catch.h"
#include "graph_nodes.h"

using namespace traincache;
using testing::nodes_of;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)

namespace {

// A module whose forward is one scaled_dot_product_attention over (text, head, query, value)
// views of (text, query, head, value) tensors, as a transformer's export holds it.
torch::jit::Module attention_module() {
  torch::jit::Module m("A");
  m.define(
      "def forward(self, q, k, v, mask: Optional[Tensor]):\n"
      "  return torch.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),\n"
      "      v.transpose(1, 2), attn_mask=mask)\n");
  m.eval();
  return m;
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::optional<torch::Tensor>& mask) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("traincache::attention", "");
  torch::jit::Stack stack{q, k, v, mask ? c10::IValue(*mask) : c10::IValue(), 0.0, false, c10::IValue(), false};
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

// The largest difference from LibTorch's attention, over the (text, head, query, value) tensors.
double off(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
           const std::optional<torch::Tensor>& mask) {
  const torch::Tensor want = at::scaled_dot_product_attention(q, k, v, mask);
  const torch::Tensor got = attention(q, k, v, mask);
  CATCH_REQUIRE(got.sizes() == want.sizes());
  return (got - want).abs().max().item<double>();
}

torch::Tensor heads(int64_t texts, int64_t len, int64_t d) {  // (text, head, query, value) of a (t, q, h, v)
  return torch::randn({texts, len, 6, d}).transpose(1, 2);
}

}  // namespace

CATCH_TEST_CASE("short attention: LibTorch's attention within float32 rounding, a query's output its own",
                "[attention]") {
  torch::manual_seed(0);
  torch::jit::Module m = attention_module();
  torch::jit::Module frozen = torch::jit::freeze(m);
  CATCH_REQUIRE(model::short_attention(*frozen.get_method("forward").graph()) == 1);
  CATCH_CHECK(nodes_of(frozen, "aten::scaled_dot_product_attention") == 0);
  CATCH_CHECK(nodes_of(frozen, "traincache::attention") == 1);
  c10::InferenceMode guard;
  // Lengths 1, 7, 16, 48 (ours) and 49 (LibTorch's); 32 and 64 values a head (ours), 16 (LibTorch's).
  for (int64_t len : {1, 7, 16, 48, 49})
    for (int64_t d : {16, 32, 64}) {
      const torch::Tensor q = heads(3, len, d), k = heads(3, len, d), v = heads(3, len, d);
      const torch::Tensor lens = torch::tensor({len, (len + 1) / 2, int64_t{1}});
      const torch::Tensor keep = (torch::arange(len).unsqueeze(0) < lens.unsqueeze(1)).view({3, 1, 1, len});
      const torch::Tensor add = torch::zeros({3, 1, len, len}).masked_fill(keep.logical_not(), -1e4);
      CATCH_CHECK(off(q, k, v, std::nullopt) <= 1e-5);
      CATCH_CHECK(off(q, k, v, keep.expand({3, 1, len, len})) <= 1e-5);
      CATCH_CHECK(off(q, k, v, keep) <= 1e-5);
      CATCH_CHECK(off(q, k, v, add) <= 1e-5);
    }
  // Through the converted graph, as an encoder's forward calls it.
  const torch::Tensor q = torch::randn({4, 16, 6, 32}), k = torch::randn({4, 16, 6, 32}),
                      v = torch::randn({4, 16, 6, 32});
  const torch::Tensor mask =
      (torch::arange(16).unsqueeze(0) < torch::tensor({16, 9, 3, 1}).unsqueeze(1)).view({4, 1, 1, 16});
  const torch::Tensor via_graph = frozen.forward({q, k, v, mask}).toTensor();
  CATCH_CHECK((via_graph - m.forward({q, k, v, mask}).toTensor()).abs().max().item<double>() <= 1e-5);
  // A text's queries give the same bits alone as padded in a batch: padding keys add exact zeros.
  const torch::Tensor alone = frozen
                                  .forward({q.slice(0, 1, 2).slice(1, 0, 9), k.slice(0, 1, 2).slice(1, 0, 9),
                                            v.slice(0, 1, 2).slice(1, 0, 9), c10::IValue()})
                                  .toTensor();
  CATCH_CHECK(torch::equal(alone[0], via_graph[1].slice(1, 0, 9)));
  // A query whose keys are all masked out: zeros (what LibTorch 2.15's attention gives too).
  const torch::Tensor none = torch::zeros({1, 1, 5, 5}, torch::kBool);
  const torch::Tensor qs = heads(1, 5, 32);
  CATCH_CHECK(torch::equal(attention(qs, qs, qs, none), torch::zeros({1, 6, 5, 32})));
  // The same past eight keys (their masks read eight at a time, the rest one by one).
  const torch::Tensor none13 = torch::zeros({1, 1, 13, 13}, torch::kBool);
  const torch::Tensor qs13 = heads(1, 13, 32);
  CATCH_CHECK(torch::equal(attention(qs13, qs13, qs13, none13), torch::zeros({1, 6, 13, 32})));
}

#else  // LibTorch before 2.5: no graph is changed

CATCH_TEST_CASE("short attention: LibTorch before 2.5 keeps its graphs", "[attention]") {
  torch::jit::Module m("A");
  m.define("def forward(self, x):\n  return torch.softmax(x, -1)\n");
  m.eval();
  torch::jit::Module frozen = torch::jit::freeze(m);
  CATCH_CHECK(model::short_attention(*frozen.get_method("forward").graph()) == 0);
  CATCH_CHECK(nodes_of(frozen, "aten::softmax") == 1);
}

#endif
