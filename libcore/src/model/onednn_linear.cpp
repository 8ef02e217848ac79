#include "traincache/model/onednn_linear.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <optional>
#include <string>
#include <vector>

namespace traincache::model {

namespace {

constexpr const char* kLinear = "mkldnn::_linear_pointwise";
constexpr const char* kReorder = "mkldnn::_reorder_linear_weight";

c10::Symbol sym(const char* name) { return c10::Symbol::fromQualString(name); }

// The weight in oneDNN's layout for its linear operator (no batch size hint: batches vary).
at::Tensor reordered(const at::Tensor& weight) {
  static const c10::OperatorHandle reorder = c10::Dispatcher::singleton().findSchemaOrThrow(kReorder, "");
  torch::jit::Stack stack{weight.contiguous(), c10::IValue()};
  reorder.callBoxed(&stack);
  return stack.at(0).toTensor();
}

// Linear node n replaced by oneDNN's, with a GELU after it folded in; false where its weight or
// bias is not a constant float32 CPU tensor (the weight a matrix). The reordered weight is an
// opaque oneDNN tensor, which a graph cannot hold as a constant: it becomes the module's attribute
// `name`, read from the graph's `self`.
bool convert(torch::jit::Module& m, torch::jit::Graph& g, torch::jit::Node* n, const std::string& name) {
  const auto w = torch::jit::toIValue(n->input(1));
  const auto b = torch::jit::toIValue(n->input(2));
  if (!w || !w->isTensor() || !b || !(b->isTensor() || b->isNone())) return false;
  const at::Tensor weight = w->toTensor();
  if (weight.dim() != 2 || weight.scalar_type() != at::kFloat || !weight.device().is_cpu()) return false;
  if (b->isTensor() && (b->toTensor().scalar_type() != at::kFloat || !b->toTensor().device().is_cpu())) return false;
  const auto gelu = gelu_after(n);
  torch::jit::Node* last = gelu ? gelu->first : n;
  torch::jit::WithInsertPoint here(last);
  torch::jit::Value* scalars =
      g.insertNode(g.createList(c10::OptionalType::create(c10::NumberType::get()), {}))->output();
  torch::jit::Value* bias =
      b->isTensor() ? g.insertConstant(b->toTensor().contiguous()) : g.insertConstant(c10::IValue());
  m.register_attribute(name, c10::TensorType::get(), reordered(weight));
  torch::jit::Value* packed = g.insertGetAttr(g.inputs().at(0), name);
  torch::jit::Value* out =
      g.insert(sym(kLinear), {n->input(0), packed, bias, gelu ? "gelu" : "none", scalars, gelu ? gelu->second : ""});
  out->setType(last->output()->type());
  last->output()->replaceAllUsesWith(out);
  if (gelu) gelu->first->destroy();
  n->destroy();
  return true;
}

}  // namespace

std::optional<std::pair<torch::jit::Node*, std::string>> gelu_after(torch::jit::Node* n) {
  const auto& uses = n->output()->uses();
  if (uses.size() != 1 || uses[0].user->kind() != sym("aten::gelu") || uses[0].offset != 0) return std::nullopt;
  torch::jit::Node* gelu = uses[0].user;
  const auto approximate = torch::jit::toIValue(gelu->input(1));
  if (!approximate || !approximate->isString()) return std::nullopt;
  const std::string a = approximate->toStringRef();
  if (a != "none" && a != "tanh") return std::nullopt;
  return std::make_pair(gelu, a);
}

void linear_nodes(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* n : block->nodes()) {
    if (n->kind() == sym("aten::linear")) out.push_back(n);
    for (torch::jit::Block* b : n->blocks()) linear_nodes(b, out);
  }
}

bool onednn_linears_available() {
  static const bool available = [] {
    if (!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) return false;
    auto& d = c10::Dispatcher::singleton();
    return d.findSchema({kLinear, ""}).has_value() && d.findSchema({kReorder, ""}).has_value();
  }();
  return available;
}

int onednn_linears(torch::jit::Module& frozen) {
  if (!onednn_linears_available()) return 0;
  auto graph = frozen.get_method("forward").graph();
  std::vector<torch::jit::Node*> linears;
  linear_nodes(graph->block(), linears);
  int done = 0;
  for (torch::jit::Node* n : linears)
    done += convert(frozen, *graph, n, "onednn_weight_" + std::to_string(done)) ? 1 : 0;
  torch::jit::EliminateDeadCode(graph);
  return done;
}

}  // namespace traincache::model
