#include "traincache/model/int8.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/version.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/model/attention.h"
#include "traincache/model/int8_rows.h"
#include "traincache/model/onednn_linear.h"
#include "traincache/model/parallel.h"

namespace traincache::model {

namespace {

// The engines whose int8 linear layers take one weight scale per output channel, best first.
const std::pair<at::QEngine, const char*> kEngines[] = {
    {at::QEngine::X86, "x86"}, {at::QEngine::FBGEMM, "fbgemm"}, {at::QEngine::ONEDNN, "onednn"}};

// The weight's per-channel int8 form (each row's largest magnitude weight_max steps), packed for
// the engine without its bias (quantized::linear_prepack).
c10::IValue packed_weight(const at::Tensor& weight, const c10::OperatorHandle& prepack,
                          int weight_max = kInt8WeightMax) {
  const at::Tensor w = weight.contiguous();
  const at::Tensor scales = (w.abs().amax({1}) / static_cast<double>(weight_max)).clamp_min(1e-12);
  const at::Tensor zeros = at::zeros({w.size(0)}, at::kLong);
  // quantize_per_channel's values (round half to even of w * (1 / scale), in float32), made by
  // vector operations: its own loop goes element by element.
  const at::Tensor q = (w * scales.reciprocal().unsqueeze(1)).round_().clamp_(-128, 127).to(at::kChar);
  torch::jit::Stack stack{at::_make_per_channel_quantized_tensor(q, scales.to(at::kDouble), zeros, 0), c10::IValue()};
  prepack.callBoxed(&stack);
  return stack.at(0);
}

torch::jit::Value* op(torch::jit::Graph& g, const char* name, at::ArrayRef<torch::jit::NamedValue> args) {
  return g.insert(c10::Symbol::fromQualString(name), args);
}

// The kernels a row-quantized linear layer runs on. With `rows` (int8_rows.h: fbgemm's headers
// were there at build time) one operator of ours does the whole layer. Else LibTorch's: with
// `fixed_range` (fbgemm's, LibTorch 2.x) the kernel takes the input's quantization (255 steps over
// [-1, 1], zero at 128) as arguments; without it (oneDNN's), it takes the range from the input,
// which is made [-1, 1] by a row of 1 and -1 appended to it.
struct Kernels {
  std::optional<c10::OperatorHandle> prepack;  // LibTorch's, where not `rows`
  bool rows = false;
  bool fixed_range = false;
  int weight_max = kInt8WeightMax;  // each weight row's largest magnitude in int8 steps
};

constexpr double kRowStep = 2.0 / 255;
constexpr int64_t kRowZero = 128;
constexpr const char* kFixedRange = "quantized::linear_with_input_q_dq_qweight_dq_output_fp32";

// Whether this LibTorch's engine runs kFixedRange on a packed weight (oneDNN's packed weights
// refuse it): tried once on a 2x2 weight.
bool fixed_range_works(const c10::OperatorHandle& prepack) {
  const auto fixed = c10::Dispatcher::singleton().findSchema({kFixedRange, ""});
  if (!fixed) return false;
  try {
    torch::jit::Stack stack{at::ones({2, 2}), kRowStep, kRowZero, packed_weight(at::eye(2), prepack)};
    fixed->callBoxed(&stack);
    return true;
  } catch (const std::exception&) {  // PackedParams' default: std::runtime_error, not c10::Error
    return false;
  }
}

// A linear node whose weight (a float32 CPU matrix) and bias (float32 or none) are constants.
struct ConstantLinear {
  torch::jit::Node* node;
  at::Tensor weight;
  std::optional<at::Tensor> bias;
  c10::IValue packed;  // packed_weight(weight)
};

// Node n as a ConstantLinear; nothing if its weight or bias is not a constant float32 tensor, or the
// weight a matrix of fewer than two columns where the kernels need the appended row.
std::optional<ConstantLinear> constant_linear(torch::jit::Node* n, const Kernels& kernels) {
  const auto w = torch::jit::toIValue(n->input(1));
  const auto b = torch::jit::toIValue(n->input(2));
  if (!w || !w->isTensor() || !b || !(b->isTensor() || b->isNone())) return std::nullopt;
  const at::Tensor weight = w->toTensor();
  if (weight.dim() != 2 || (weight.size(1) < 2 && !kernels.fixed_range && !kernels.rows) ||
      weight.scalar_type() != at::kFloat || !weight.device().is_cpu())
    return std::nullopt;
  std::optional<at::Tensor> bias;
  if (b->isTensor()) {
    if (b->toTensor().scalar_type() != at::kFloat) return std::nullopt;
    bias = b->toTensor();
  }
  return ConstantLinear{n, weight, bias, c10::IValue()};
}

// y = x W^T + b with W in int8 (l.packed) and each row of x quantized to 8 bits on its own: the
// rows are divided by their largest magnitude, so that the kernel's range [-1, 1] is the same
// whatever the batch, and the output rows are scaled back. A row's output then depends on that row
// alone (as long as its float32 input is the same bits: a last-bit difference can cross a rounding
// step).
torch::jit::Value* row_quantized_linear(torch::jit::Graph& g, torch::jit::Value* x, const ConstantLinear& l,
                                        const Kernels& kernels) {
  if (kernels.rows) return op(g, kRowInt8Linear, {x, g.insertConstant(l.packed)});
  const int64_t n = l.weight.size(0), k = l.weight.size(1);
  torch::jit::Value* rows = op(g, "aten::reshape", {x, std::vector<int64_t>{-1, k}});
  // Each row's largest magnitude, max(-min, max), from two reductions over the rows (abs then
  // amax also wrote a copy of them; linalg_vector_norm's inf norm was slower).
  const std::vector<int64_t> dim{1};
  torch::jit::Value* largest =
      op(g, "aten::maximum",
         {op(g, "aten::neg", {op(g, "aten::amin", {rows, dim, true})}), op(g, "aten::amax", {rows, dim, true})});
  torch::jit::Value* scale = op(g, "aten::clamp_min", {largest, 1e-30});
  torch::jit::Value* unit = op(g, "aten::div", {rows, scale});
  torch::jit::Value* packed = g.insertConstant(l.packed);
  torch::jit::Value* y = nullptr;
  if (kernels.fixed_range) {
    y = op(g, kFixedRange, {unit, kRowStep, kRowZero, packed});
  } else {
    at::Tensor pad = at::zeros({1, k});
    pad.index_put_({0, 0}, 1.0);
    pad.index_put_({0, 1}, -1.0);
    torch::jit::Value* both =
        g.insertNode(g.createList(c10::TensorType::get(), {unit, g.insertConstant(pad)}))->output();
    y = op(g, "quantized::linear_dynamic", {op(g, "aten::cat", {both, int64_t{0}}), packed, false});
    y = op(g, "aten::slice", {y, int64_t{0}, int64_t{0}, int64_t{-1}, int64_t{1}});
  }
  // bias + y * scale in one pass where there is a bias.
  torch::jit::Value* out = l.bias ? op(g, "aten::addcmul", {g.insertConstant(l.bias->contiguous()), y, scale})
                                  : op(g, "aten::mul", {y, scale});
  // Back to x's leading dimensions: x.size()[:-1] + [n].
  torch::jit::Value* lead = op(g, "aten::slice", {op(g, "aten::size", {x}), int64_t{0}, int64_t{-1}, int64_t{1}});
  return op(g, "aten::reshape", {out, op(g, "aten::add", {lead, std::vector<int64_t>{n}})});
}

// Linear node l.node replaced by row_quantized_linear.
void convert(torch::jit::Graph& graph, const ConstantLinear& l, const Kernels& kernels) {
  torch::jit::Node* n = l.node;
  torch::jit::WithInsertPoint here(n);
  torch::jit::Value* out = row_quantized_linear(graph, n->input(0), l, kernels);
  out->setType(n->output()->type());
  n->output()->replaceAllUsesWith(out);
  n->destroy();
}

// Layers `group` (more than one, reading the same input in the same block, in graph order) replaced
// by one call of the row operator, which quantizes the input's rows once for all of them.
void convert_joined(torch::jit::Graph& graph, const std::vector<const ConstantLinear*>& group) {
  torch::jit::Node* first = group.front()->node;
  torch::jit::WithInsertPoint here(first);
  std::vector<c10::IValue> weights;
  for (const ConstantLinear* l : group) weights.push_back(l->packed);
  torch::jit::Value* outs = op(graph, kRowInt8Linears, {first->input(0), graph.insertConstant(row_int8_join(weights))});
  torch::jit::Node* unpack = graph.insertNode(graph.createListUnpack(outs, group.size()));
  for (std::size_t i = 0; i < group.size(); ++i) {
    torch::jit::Node* n = group[i]->node;
    unpack->output(i)->setType(n->output()->type());
    n->output()->replaceAllUsesWith(unpack->output(i));
    n->destroy();
  }
}

// A residual added to linear node n's output and the layer norm of the sum, as a transformer's
// layers end: n's output's only use an aten::add of another tensor (either side, alpha 1), the sum's
// only use aten::layer_norm over the last `outs` values with constant float32 weight and bias.
struct NormAfter {
  torch::jit::Node* add;
  torch::jit::Node* norm;
  torch::jit::Value* residual;
  at::Tensor weight, bias;
  double eps;
};

std::optional<NormAfter> norm_after(torch::jit::Node* n, int64_t outs) {
  auto only_use = [](torch::jit::Value* v, const char* kind) -> torch::jit::Node* {
    const auto& uses = v->uses();
    return uses.size() == 1 && uses[0].user->kind() == c10::Symbol::fromQualString(kind) ? uses[0].user : nullptr;
  };
  torch::jit::Node* add = only_use(n->output(), "aten::add");
  if (!add || add->inputs().size() != 3) return std::nullopt;
  torch::jit::Value* residual = add->input(0) == n->output() ? add->input(1) : add->input(0);
  const auto alpha = torch::jit::toIValue(add->input(2));
  if (residual == n->output() || !residual->type()->isSubtypeOf(*c10::TensorType::get()) || !alpha ||
      !(alpha->isInt() ? alpha->toInt() == 1 : alpha->isDouble() && alpha->toDouble() == 1.0))
    return std::nullopt;
  torch::jit::Node* norm = only_use(add->output(), "aten::layer_norm");
  if (!norm || norm->input(0) != add->output()) return std::nullopt;
  const auto shape = torch::jit::toIValue(norm->input(1));
  const auto weight = torch::jit::toIValue(norm->input(2));
  const auto bias = torch::jit::toIValue(norm->input(3));
  const auto eps = torch::jit::toIValue(norm->input(4));
  if (!shape || !shape->isIntList() || shape->toIntVector() != std::vector<int64_t>{outs} || !eps || !eps->isDouble())
    return std::nullopt;
  for (const auto& t : {weight, bias})
    if (!t || !t->isTensor() || t->toTensor().scalar_type() != at::kFloat || !t->toTensor().device().is_cpu() ||
        t->toTensor().sizes() != at::IntArrayRef{outs})
      return std::nullopt;
  return NormAfter{add, norm, residual, weight->toTensor(), bias->toTensor(), eps->toDouble()};
}

// Layer l replaced by the row operator with what follows it folded in where it can be: a GELU, or a
// residual added and a layer norm (docs/models.md, "int8 on the CPU").
void convert_folding(torch::jit::Graph& graph, const ConstantLinear& l, const Kernels& kernels) {
  torch::jit::Node* n = l.node;
  std::vector<torch::jit::Node*> folded;  // the last first, each the only use of the next one's output
  torch::jit::Value* out = nullptr;
  if (const auto gelu = gelu_after(n)) {
    row_int8_gelu(l.packed, gelu->second);
    folded = {gelu->first, n};
    torch::jit::WithInsertPoint here(folded.front());
    out = op(graph, kRowInt8Linear, {n->input(0), graph.insertConstant(l.packed)});
  } else if (const auto norm = norm_after(n, l.weight.size(0))) {
    row_int8_norm(l.packed, norm->weight, norm->bias, norm->eps);
    folded = {norm->norm, norm->add, n};
    torch::jit::WithInsertPoint here(folded.front());
    out = op(graph, kRowInt8LinearNorm, {n->input(0), norm->residual, graph.insertConstant(l.packed)});
  } else {
    return convert(graph, l, kernels);
  }
  out->setType(folded.front()->output()->type());
  folded.front()->output()->replaceAllUsesWith(out);
  for (torch::jit::Node* dead : folded) dead->destroy();
}

// Every layer of `linears` (in graph order) converted; with the row operator, those that read the
// same input (a transformer's query, key and value) as one call, the others with what follows
// them folded in.
void convert_all(torch::jit::Graph& graph, const std::vector<ConstantLinear>& linears, const Kernels& kernels) {
  if (!kernels.rows) {
    for (const ConstantLinear& l : linears) convert(graph, l, kernels);
    return;
  }
  std::vector<std::vector<const ConstantLinear*>> groups;
  std::map<std::pair<torch::jit::Block*, torch::jit::Value*>, std::size_t> group_of;
  for (const ConstantLinear& l : linears) {
    auto [at, added] = group_of.emplace(std::make_pair(l.node->owningBlock(), l.node->input(0)), groups.size());
    if (added) groups.emplace_back();
    groups[at->second].push_back(&l);
  }
  for (const auto& group : groups) {
    if (group.size() == 1)
      convert_folding(graph, *group.front(), kernels);
    else
      convert_joined(graph, group);
  }
}

// The linear nodes whose weights are constants, their weights packed: a layer each on LibTorch's
// intra-op threads (model/parallel.h; MiniLM's 36 took 0.07 s on one core).
std::vector<ConstantLinear> packed_linears(const std::vector<torch::jit::Node*>& nodes, const Kernels& kernels) {
  std::vector<ConstantLinear> found;
  for (torch::jit::Node* n : nodes)
    if (auto l = constant_linear(n, kernels)) found.push_back(std::move(*l));
  parallel_for(0, static_cast<int64_t>(found.size()), 1, [&](int64_t a, int64_t b) {  // rethrows here
    for (int64_t i = a; i < b; ++i)
      found[i].packed = kernels.rows ? row_int8_weight(found[i].weight, found[i].bias, kernels.weight_max)
                                     : packed_weight(found[i].weight, *kernels.prepack, kernels.weight_max);
  });
  return found;
}

// Drops LibTorch's warning that quantized tensors are deprecated while the weights are quantized:
// docs/models.md says what the deprecation means for --precision int8.
#if TORCH_VERSION_MAJOR >= 2
class Quiet : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};
#endif

// The best of kEngines this LibTorch supports, or nullptr.
const std::pair<at::QEngine, const char*>* best_engine() {
  const auto& supported = at::globalContext().supportedQEngines();
  for (const auto& e : kEngines)
    if (std::find(supported.begin(), supported.end(), e.first) != supported.end()) return &e;
  return nullptr;
}

// The kernels for this build and CPU: ours (int8_rows.h) where it has them, else the best engine's
// of LibTorch, which becomes the process's quantized engine. *engine: its name.
Kernels choose_kernels(std::string* engine) {
  Kernels k;
  k.rows = row_int8_available();
  if (k.rows) {
    *engine = "fbgemm";
    return k;
  }
  const auto* e = best_engine();  // require_int8: there is one
  *engine = e->second;
  at::globalContext().setQEngine(e->first);
  k.prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_prepack", "");
  k.fixed_range = fixed_range_works(*k.prepack);
  return k;
}

}  // namespace

std::string int8_engine() {
  if (row_int8_available()) return "fbgemm";
  const auto* e = best_engine();
  return e ? e->second : "";
}

std::string int8_unavailable() {
#if TORCH_VERSION_MAJOR < 2
  return std::string("LibTorch ") + TORCH_VERSION +
         "'s int8 linear layers move a row's output with its batch (Debian's build has oneDNN's, not fbgemm's); "
         "int8 needs LibTorch 2.0 or later";
#else
  if (row_int8_available()) return "";  // fbgemm's GEMM itself: no quantized tensors or operators
  if (int8_engine().empty()) return "this LibTorch has no int8 engine for linear layers (fbgemm, x86 or onednn)";
  for (const char* name : {"quantized::linear_prepack", "quantized::linear_dynamic"})
    if (!c10::Dispatcher::singleton().findSchema({name, ""})) return std::string("this LibTorch lacks ") + name;
  return "";
#endif
}

void require_int8() {
  if (const std::string why = int8_unavailable(); !why.empty())
    throw Error(Exit::unavailable, "--precision int8", why + "; use --precision fp32 or bf16");
}

torch::jit::Module int8_module(const torch::jit::Module& module, const std::string& subject, Int8Conversion* done,
                               int weight_max) {
  require_int8();
  if (weight_max < 1 || weight_max > 127)
    throw Error(Exit::data, subject,
                "int8 weights of at most " + std::to_string(weight_max) + " steps: expected 1-127");
  Int8Conversion r;
#if TORCH_VERSION_MAJOR >= 2
  Quiet quiet;
  c10::WarningUtils::WarningHandlerGuard quiet_guard(&quiet);
#endif
  Kernels kernels = choose_kernels(&r.engine);
  kernels.weight_max = weight_max;
  torch::jit::Module frozen = torch::jit::freeze(module);
  auto graph = frozen.get_method("forward").graph();
  std::vector<torch::jit::Node*> nodes;
  linear_nodes(graph->block(), nodes);
  const std::vector<ConstantLinear> linears = packed_linears(nodes, kernels);
  convert_all(*graph, linears, kernels);
  r.linears = static_cast<int>(linears.size());
  r.left = static_cast<int>(nodes.size() - linears.size());
  if (r.linears == 0)
    throw Error(Exit::data, subject,
                "--precision int8 converts linear layers, and this encoder has none with a constant weight (" +
                    std::to_string(r.left) + " in all); use --precision fp32 or bf16");
  short_attention(*graph);
  torch::jit::EliminateDeadCode(graph);
  torch::jit::Module optimised = torch::jit::optimize_for_inference(frozen);
  if (done) *done = r;
  return optimised;
}

}  // namespace traincache::model
