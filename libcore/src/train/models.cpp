#include "models.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "context.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/sha256.h"
#include "traincache/model/encode.h"
#include "traincache/model/precision_torch.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::train {

namespace {

// A built-in head "mlp:H1,...,Hn" (ReLU between layers) or "linear:D", as a TorchScript module so
// that --out is loadable with torch.jit.load. Weights are initialised like nn.Linear.
torch::jit::Module build_head(const std::string& spec, int64_t in_dim) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  if (kind != "mlp" && kind != "linear")
    throw Error(Exit::usage, "--head", "expected mlp:H1,...,Hn, linear:D or a TorchScript file, got '" + spec + "'");
  std::vector<int64_t> dims;
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::size_t pos = 0;
  while (pos < rest.size()) {
    std::size_t next = rest.find(',', pos);
    if (next == std::string::npos) next = rest.size();
    try {
      dims.push_back(std::stoll(rest.substr(pos, next - pos)));
    } catch (const std::exception&) {
      throw Error(Exit::usage, "--head", "not a layer width in '" + spec + "'");
    }
    if (dims.back() <= 0) throw Error(Exit::usage, "--head", "layer widths must be positive");
    pos = next + 1;
  }
  if (dims.empty() || (kind == "linear" && dims.size() != 1))
    throw Error(Exit::usage, "--head", "'" + spec + "' names no layer widths");
  torch::jit::Module m("TraincacheHead");
  std::string body = "def forward(self, x):\n  h = x\n";
  int64_t fan_in = in_dim;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    auto w = torch::empty({dims[i], fan_in}).uniform_(-bound, bound);
    auto b = torch::empty({dims[i]}).uniform_(-bound, bound);
    m.register_parameter("weight" + std::to_string(i), w, false);
    m.register_parameter("bias" + std::to_string(i), b, false);
    body += "  h = torch.matmul(h, self.weight" + std::to_string(i) + ".t()) + self.bias" + std::to_string(i) + "\n";
    if (i + 1 < dims.size()) body += "  h = torch.relu(h)\n";
    fan_in = dims[i];
  }
  body += "  return h\n";
  m.define(body);
  return m;
}

void refuse_batchnorm(const torch::jit::Module& m, const std::string& what) {
  for (const auto& b : m.named_buffers())
    if (b.name.find("running_mean") != std::string::npos)
      throw Error(Exit::data, what,
                  "has BatchNorm layers (" + b.name +
                      "); gradient caching would update their running statistics twice: use "
                      "LayerNorm/GroupNorm, or --no-gradcache");
}

train::Tower tower_of(torch::jit::Module* m, const std::string& name) {
  return [m, name](const std::vector<torch::Tensor>& inputs) {
    torch::jit::IValue out =
        model::call_forward(*m, std::vector<torch::jit::IValue>(inputs.begin(), inputs.end()), name);
    if (!out.isTensor()) throw Error(Exit::data, name, "forward() must return one tensor");
    auto t = out.toTensor();
    return t.dim() == 2 ? t : t.reshape({t.size(0), -1});
  };
}

void save_module(torch::jit::Module& m, const std::string& path) {
  std::ostringstream bytes;
  try {
    m.save(bytes);
  } catch (const std::exception& e) {
    throw Error(Exit::internal, path, "cannot serialise the trained model: " + model::torch_error_message(e.what()));
  }
  files::write_file_atomically(path, bytes.str());
}

// A text side's tower: the encoder gets input_ids, attention_mask and, when its forward() takes
// three tensors, token_type_ids; padded to the longest, each chunk is trimmed to its own longest.
train::Tower text_tower(torch::jit::Module* m, const std::string& name, const TextSide& t,
                        const std::string& vocab_table) {
  const std::size_t arity = model::text_tensors(model::forward_arity(*m), 0, 1, name);
  if (t.tok) model::check_vocabulary(*m, name, *t.tok, t.tokenizer, vocab_table);
  const auto table = model::token_table(*m, t.tok ? t.tok->vocab_size() : 0, vocab_table);
  if (table && !t.tok && !t.seqs.ids.empty()) {
    const int64_t top = *std::max_element(t.seqs.ids.begin(), t.seqs.ids.end());
    if (top >= table->rows)
      throw Error(Exit::data, name,
                  t.tokenizer + " holds token id " + std::to_string(top) + ", beyond its embedding table " +
                      table->name + " of " + std::to_string(table->rows) + " rows");
  }
  if (const auto pos = model::position_table(*m, table ? table->name : "")) {
    const auto [i, n] = t.longest();
    if (n > pos->rows)
      throw Error(Exit::data, name,
                  t.describe(i) + " holds " + std::to_string(n) + " tokens but the position table " + pos->name +
                      " has " + std::to_string(pos->rows) + " rows: give --max-length " + std::to_string(pos->rows) +
                      " (or less)");
  }
  return [inner = tower_of(m, name), arity, trim = t.length == 0](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> args(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(arity));
    if (trim) {
      model::trim_padding(args.data(), args.size(), in[1]);
    }
    return inner(args);
  };
}

// Text sides: their towers, and their tokenisation among the settings a checkpoint must match.
void use_text(const TrainOptions& o, const Data& d, Models& m) {
  auto config = [&](const TextSide& t) {
    if (!t.tok) return json{{"ragged", true}, {"pad_id", t.seqs.pad_id}};
    return json{{"tokenizer_sha256", sha256_file(t.tokenizer)},
                {"max_length", text::effective_max_length(*t.tok, o.tokenize)},
                {"padding", text::padding_choices().name(o.tokenize.padding)},
                {"strict_utf8", o.tokenize.strict_utf8}};
  };
  if (const TextSide* t = d.query->text()) {
    m.q_tower = text_tower(m.q, "query encoder", *t, o.tokenize.vocab_table);
    m.q_by_length = t->length == 0;
    m.config["text"]["query"] = config(*t);
  }
  if (const TextSide* t = d.passage ? d.passage->text() : nullptr) {
    m.p_tower = text_tower(m.p, "passage encoder", *t, o.tokenize.vocab_table);
    m.p_by_length = t->length == 0;
    m.config["text"]["passage"] = config(*t);
  }
}

}  // namespace

// The training data and the modules that train on it.
Models load_models(const TrainOptions& o, const Setup& s, Data& data, TextAhead* ahead) {
  Models m;
  m.modules.reserve(2);
  std::vector<std::string> names;
  if (!s.cached) {
    m.grouped = !o.labels.empty();
    data = load_raw(o, s, o.data, true, ahead);  // loaded or streamed by run_train
    const bool tied = !o.encoder.empty();        // validate_raw_sides: or both separate ones
    names = tied ? std::vector<std::string>{o.encoder} : std::vector<std::string>{o.query_encoder, o.passage_encoder};
    for (const auto& n : names) m.modules.push_back(model::load_module(n, s.device));
    m.mode = m.grouped ? "raw-grouped" : tied ? "raw-tied" : "raw-separate";
    m.config["encoders"] =
        tied ? json{canonical(o.encoder)} : json{canonical(o.query_encoder), canonical(o.passage_encoder)};
  } else {
    m.grouped = !o.embeddings.empty();  // validate_cached_sides: or both aligned sides
    std::string fingerprint;
    data = load_cached(o, s, o.cache, m.grouped, !o.cache_shm.empty(), &fingerprint);
    struct stat st;
    bool head_file = stat(o.head.c_str(), &st) == 0;
    m.modules.push_back(head_file ? model::load_module(o.head, s.device)
                                  : build_head(o.head, data.query->datasets().front()->sizes()[1]));
    names = {o.head};
    m.mode = m.grouped ? "cached-grouped" : "cached-aligned";
    m.config["cache_fingerprint"] = fingerprint;
    m.config["head"] = canonical(o.head);
  }
  for (std::size_t i = 0; i < m.modules.size(); ++i) {
    m.modules[i].to(s.device);
    model::to_float_type(m.modules[i], s.float_type);
    m.modules[i].train();
    if (o.gradcache) refuse_batchnorm(m.modules[i], names[i]);
  }
  m.q = &m.modules[0];
  m.p = m.modules.size() > 1 ? &m.modules[1] : &m.modules[0];
  m.distinct = {m.q};
  if (m.p != m.q) m.distinct.push_back(m.p);
  // Built-in heads are trained whole; a loaded module keeps its own requires_grad flags, so a
  // frozen part (requires_grad=False when it was saved) stays frozen.
  bool builtin_head = s.cached && !fs::exists(o.head);
  for (auto& p : unique_params(m.distinct)) {
    if (builtin_head) p.set_requires_grad(true);
    if (p.requires_grad()) m.params.push_back(p);
  }
  if (m.params.empty()) throw Error(Exit::data, names[0], "has no parameter that requires grad: nothing to train");
  m.q_tower = tower_of(m.q, "query encoder");
  m.p_tower = tower_of(m.p, "passage encoder");
  if (s.cached) {
    m.q_tower = [t = tower_of(m.q, "head"), dev = s.device](const std::vector<torch::Tensor>& in) {
      return t({in[0].to(dev)});
    };
    m.p_tower = m.q_tower;
  } else {
    use_text(o, data, m);
    if (data.query->text() || (data.passage && data.passage->text())) model::for_varying_shapes(s.device);
  }
  if (o.precision != Precision::fp32) {  // the towers under autocast; the loss sees float32
    auto mixed = [p = o.precision, dev = s.device, ft = s.float_type](train::Tower t) -> train::Tower {
      return [t = std::move(t), p, dev, ft](const std::vector<torch::Tensor>& in) {
        model::Autocast region(p, dev);
        return t(in).to(ft);
      };
    };
    m.q_tower = mixed(m.q_tower);
    m.p_tower = mixed(m.p_tower);
  }
  return m;
}

std::vector<torch::Tensor> unique_params(const std::vector<torch::jit::Module*>& mods) {
  std::vector<torch::Tensor> params;
  std::set<const void*> seen;
  for (auto* m : mods)
    for (const auto& p : m->parameters())
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  return params;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        const std::vector<torch::Tensor>& params) {
  if (o.optimizer == Optimizer::sgd)
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
}

train::LossConfig loss_config(const TrainOptions& o, const ObjectiveSpec& spec) {
  train::LossConfig c;
  c.similarity = o.similarity;
  c.temperature = o.temperature;
  switch (spec.kind) {
    case Objective::supcon:
      c.kind = train::LossKind::supcon;
      break;
    case Objective::softmax:
      c.kind = train::LossKind::softmax;
      break;
    case Objective::arcface:
      c.kind = train::LossKind::arcface;
      break;
    case Objective::cosface:
      c.kind = train::LossKind::cosface;
      break;
    case Objective::triplet:
      c.kind =
          spec.mining == Mining::semi_hard ? train::LossKind::triplet_semi_hard : train::LossKind::triplet_batch_hard;
      break;
    default:
      c.kind = spec.symmetric ? train::LossKind::symmetric : train::LossKind::infonce;
  }
  c.margin = spec.margin;
  c.scale = spec.scale;
  // --loss-chunk; else on a GPU as many anchors as 2^25 logits allow (0: gradcache.cpp), where fewer,
  // larger chunks save kernel launches, and on the CPU the query chunk, where they save nothing and
  // the loss's memory stays that of the chunks.
  c.anchor_chunk = o.loss_chunk > 0 ? o.loss_chunk : model::parse_device_spec(o.device).cuda ? 0 : o.query_chunk;
  return c;
}

// The classifier of softmax, arcface and cosface: one class per distinct label of the training
// rows (ascending), as wide as the representations. Rows whose label training lacks get class -1
// (wrong in every evaluation). Built before the first broadcast so that every rank starts alike.
void attach_classifier(TrainRun& r) {
  const RowSplit& split = r.split;
  Data& data = r.data;
  Models& m = r.m;
  std::vector<Data*> also;
  if (r.eval.use_external) also.push_back(&r.eval.external);
  auto train_labels = label_list(data.labels.index_select(0, torch::tensor(split.train, torch::kLong)));
  std::set<int64_t> distinct(train_labels.begin(), train_labels.end());
  const std::vector<int64_t> classes(distinct.begin(), distinct.end());
  also.push_back(&data);
  for (Data* d : also) {
    auto lut = label_list(d->labels);
    for (auto& l : lut) {
      auto it = std::lower_bound(classes.begin(), classes.end(), l);
      l = it != classes.end() && *it == l ? it - classes.begin() : -1;
    }
    d->classes = torch::tensor(lut, torch::kLong);
  }
  int64_t dim = 0;
  {  // the representation width: one row through the tower, in eval mode (no dropout draws)
    torch::NoGradGuard no_grad;
    m.q->eval();
    dim = m.q_tower(data.query->inputs(torch::tensor({split.train.front()}, torch::kLong))).size(1);
    m.q->train();
  }
  m.classifier = train::make_classifier(r.loss.kind, classes, dim, r.loss.scale, r.s.float_type, r.s.device);
  m.classifier->train();
  m.distinct.push_back(&*m.classifier);
  for (const auto& p : m.classifier->parameters()) m.params.push_back(p);
  train::use_classifier(r.loss, *m.classifier);
  r.result.classes = m.classifier->attr("labels").toTensor().size(0);
}

// --out (and --passage-out): the trained modules as TorchScript, written by rank 0.
void save_outputs(const TrainOptions& o, Models& m) {
  if (!o.out.empty()) {
    m.q->eval();
    save_module(*m.q, o.out);
    m.q->train();
  }
  if (m.p != m.q && !o.passage_out.empty()) {
    m.p->eval();
    save_module(*m.p, o.passage_out);
    m.p->train();
  }
  if (m.classifier && !o.classifier_out.empty()) save_module(*m.classifier, o.classifier_out);
}

}  // namespace traincache::train
