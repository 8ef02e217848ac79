#include "traincache/model/onednn_linear.h"

#include <string>

#include "catch.h"
#include "graph_nodes.h"

using namespace traincache;
using testing::nodes_of;

CATCH_TEST_CASE(
    "onednn linears: each constant linear layer on oneDNN, a GELU folded in, within float32 rounding of ATen",
    "[onednn]") {
  torch::manual_seed(0);
  torch::jit::Module m = testing::two_linear_module("gelu");
  torch::jit::Module frozen = torch::jit::freeze(m);
  CATCH_REQUIRE(nodes_of(frozen, "aten::linear") == 2);
  const int done = model::onednn_linears(frozen);
  if (!model::onednn_linears_available()) {  // Debian 12's LibTorch 1.13: the graph is left as it was
    CATCH_CHECK(done == 0);
    CATCH_CHECK(nodes_of(frozen, "aten::linear") == 2);
    return;
  }
  CATCH_CHECK(done == 2);
  CATCH_CHECK(nodes_of(frozen, "aten::linear") == 0);
  CATCH_CHECK(nodes_of(frozen, "aten::gelu") == 0);
  CATCH_CHECK(nodes_of(frozen, "mkldnn::_linear_pointwise") == 2);
  c10::InferenceMode guard;
  const torch::Tensor x = torch::randn({64, 32});
  const torch::Tensor want = m.forward({x}).toTensor(), got = frozen.forward({x}).toTensor();
  CATCH_CHECK(got.sizes() == want.sizes());
  const double diff = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  CATCH_CHECK(diff <= 1e-5 * want.abs().max().item<double>());
}
