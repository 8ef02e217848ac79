#include "evaluation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>

#include "checkpointer.h"
#include "context.h"
#include "setup.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/model/encode.h"

namespace fs = std::filesystem;

namespace traincache::train {

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) : path_(path) {
  if (path.empty()) return;
  fd_ = files::open_log(path, resume_step > 0);
  struct stat st {};
  if (resume_step <= 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return;  // /dev/null: nothing to cut
  // The first line of a step past the resumed one, and everything after it, goes.
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  std::string text(static_cast<std::size_t>(std::max<off_t>(size, 0)), '\0');
  if (size < 0 || ::pread(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw Error(Exit::io, path, "cannot read it to resume: " + errno_text(errno));
  std::size_t keep = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    const std::size_t end = nl == std::string::npos ? text.size() : nl + 1;
    const auto line = nlohmann::json::parse(text.substr(at, end - at), nullptr, false);
    if (line.is_object() && line.contains("step") && line["step"].is_number_integer() &&
        line["step"].get<int64_t>() > resume_step)
      break;
    if (nl == std::string::npos) break;  // a torn last line (the crash): cut too
    keep = at = end;
  }
  if (keep < text.size() && ::ftruncate(fd_, static_cast<off_t>(keep)) != 0)
    throw Error(Exit::io, path,
                "cannot cut the lines past step " + std::to_string(resume_step) + ": " + errno_text(errno));
}

namespace {

// The representations of `inputs`, a chunk at a time; rows [done, done + n) of `total` to `progress`.
torch::Tensor encode_eval(const train::Tower& tower, const std::vector<torch::Tensor>& inputs, int64_t chunk,
                          const EvalProgress& progress = {}, int64_t done = 0, int64_t total = 0) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> reps;
  int64_t n = inputs.front().size(0);
  for (int64_t a = 0; a < n; a += chunk) {
    reps.push_back(tower(model::slice_rows(inputs, a, std::min(a + chunk, n))));
    if (progress) progress(done + std::min(a + chunk, n), total);
  }
  return torch::cat(reps);
}

// Evaluation representations that are not finite are refused: NaN ranks anywhere, and the metrics
// would move without a word. Names the first such row (a data row) and whether its inputs hold
// NaN or infinity (a damaged or foreign cache, as cache-fill never stores such rows) or the model
// made it so.
void require_finite(const torch::Tensor& reps, const std::vector<int64_t>& rows,
                    const std::vector<torch::Tensor>& inputs, const char* side) {
  const auto bad = (~torch::isfinite(reps).all(1)).nonzero().reshape({-1}).to(torch::kCPU);
  if (bad.numel() == 0) return;
  const int64_t first = bad[0].item<int64_t>();
  bool input_bad = false;
  for (const auto& x : inputs)
    if (x.is_floating_point() && x.size(0) == reps.size(0))
      input_bad = input_bad || !torch::isfinite(x[first]).all().item<bool>();
  throw Error(Exit::data, "evaluation row " + std::to_string(rows[static_cast<std::size_t>(first)]),
              std::string("its ") + side + " representation is not finite (" + std::to_string(bad.numel()) +
                  " evaluation row(s) are): " +
                  (input_bad ? "its input holds NaN or infinity (cache-fill never stores such rows: a damaged or "
                               "foreign file?)"
                             : "the model made it so (training diverged? lower --lr, or --clip-norm)"));
}

}  // namespace

// Per-query metrics of the rows `idx` (docs/gc-train.md, "Metrics"): each query against every
// passage of the set (pair modes), or each row against every other row (grouped mode); with a
// classifier (`loss` of a classifier kind, d.classes), also its top-k accuracy on every row.
train::QueryTable evaluate(const Data& d, const torch::Tensor& idx, const Models& m, const train::LossConfig& loss,
                           const TrainOptions& o, const EvalProgress& progress) {
  const train::Tower &q_tower = m.q_tower, &p_tower = m.p_tower;
  const bool grouped = m.grouped;
  const int64_t chunk = std::max(o.query_chunk, o.passage_chunk);
  const std::vector<int64_t>& ks = o.eval_k;
  torch::NoGradGuard no_grad;
  auto norm = [&](torch::Tensor x) {
    return loss.similarity == train::Similarity::cos
               ? torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(1))
               : x;
  };
  const int64_t n = idx.size(0), total = grouped ? n : 2 * n;
  const auto rows = row_list(idx);
  const auto q_in = d.query->inputs(idx);
  auto reps = encode_eval(q_tower, q_in, chunk, progress, 0, total);
  require_finite(reps, rows, q_in, "query");
  auto q = norm(reps).to(torch::kFloat64);
  if (!grouped) {
    const auto p_in = d.passage->inputs(idx);
    auto p_reps = encode_eval(p_tower, p_in, chunk, progress, n, total);
    require_finite(p_reps, rows, p_in, "passage");
    auto p = norm(p_reps).to(torch::kFloat64);
    return train::retrieval_table(q, p, rows, ks);
  }
  auto table = train::labelled_table(q, d.labels.index_select(0, idx.to(d.labels.device())), rows, ks);
  if (train::is_classifier(loss.kind)) {
    auto logits = train::class_logits(reps, loss).to(torch::kFloat64);
    train::add_classification(table, logits, d.classes.index_select(0, idx.to(d.classes.device())), rows, ks);
  }
  return table;
}

Evaluation prepare_evaluation(const TrainRun& r) {
  const TrainOptions& o = r.o;
  const Setup& s = r.s;
  const Data& data = r.data;
  const bool grouped = r.m.grouped;
  Evaluation e;
  e.use_external = !o.eval_data.empty();
  if (e.use_external) {
    e.external =
        s.cached ? load_cached(o, s, o.eval_data, grouped, false, nullptr) : load_raw(o, s, o.eval_data, o.stream);
    const auto ours = data.query->datasets(), theirs = e.external.query->datasets();
    for (std::size_t i = 0; i < ours.size() && i < theirs.size(); ++i)
      if (auto a = theirs[i]->sizes(), b = ours[i]->sizes();
          !std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end()))
        throw Error(Exit::data, o.eval_data, "holds rows of another shape than the training data");
  }
  e.idx = e.use_external ? torch::arange(e.external.rows, torch::kLong) : torch::tensor(r.split.eval, torch::kLong);
  e.enabled = e.use_external || !r.split.eval.empty();
  for (const auto* out : {&o.eval_dump, &o.classifier_out}) {  // refused now, not after training
    if (out->empty() || s.rank != 0) continue;
    const std::string dir = files::dir_name(*out);
    if (!fs::is_directory(dir)) throw Error(Exit::cant_create, *out, "cannot create: no directory " + dir);
  }
  return e;
}

Monitor::Monitor(TrainRun& run, MetricsLog& log, Checkpointer& ckpt)
    : o_(run.o),
      s_(run.s),
      group_(run.group),
      eval_(run.eval),
      data_(run.data),
      m_(run.m),
      loss_(run.loss),
      log_(log),
      ckpt_(ckpt),
      cb_(run.cb),
      best_(run.result.best) {
  if (!o_.select_best.empty()) best_.metric = o_.select_best;  // validate_selection: a metric of the mode
}

bool Monitor::evaluate(int64_t step, int64_t epoch, EvalMetrics* out, bool during) {
  bool is_best = false, stop = false;
  if (s_.rank == 0) {
    auto r = eval_.run(o_, data_, m_, loss_, step, cb_.eval_progress);
    if (!best_.metric.empty()) {
      is_best = update_best(best_, value_of(r, best_.metric), step);
      stop = patience_exhausted(best_, o_.early_stop);
      if (is_best) save_outputs(o_, m_);
    }
    log_.write({{"step", step}, {"epoch", epoch}, {"eval", eval_json(r)}});
    if (cb_.evaluated && during) cb_.evaluated(step, r, is_best);
    last_ = r;
    if (out) *out = std::move(r);
  }
  last_step_ = step;  // on every rank: final_evaluation() must agree on whether to evaluate
  if (group_) {       // rank 0's decisions, for the collective below and the loop
    auto flags = torch::tensor({is_best ? 1.0 : 0.0, stop ? 1.0 : 0.0}, torch::kFloat64);
    std::vector<torch::Tensor> t{flags.to(m_.params[0].device())};
    group_->broadcast(t, 0);
    is_best = t[0][0].item<double>() > 0;
    stop = t[0][1].item<double>() > 0;
  }
  if (is_best && ckpt_.enabled()) ckpt_.save(step, m_.params, *opt_, true);
  return stop;
}

bool Monitor::after_step(int64_t n, int64_t total, int64_t per_epoch) {
  if (!eval_.enabled || o_.eval_every <= 0 || n % o_.eval_every != 0 || n >= total) return false;
  return evaluate(n, (n - 1) / per_epoch, nullptr, true);
}

EvalMetrics Monitor::final_evaluation(int64_t step, int64_t epoch) {
  if (last_step_ == step) return last_;
  EvalMetrics r;
  evaluate(step, epoch, &r);
  return r;
}

double Monitor::value_of(const EvalMetrics& r, const std::string& key) {
  for (const auto& x : r.metrics)
    if (x.key == key) return x.value;
  return -INFINITY;  // no queries: never a best
}

// Warnings about the labels of grouped mode (rank 0, with an evaluation): classes missing from
// one side of the split, and evaluation rows a classifier cannot predict.
void warn_about_labels(const TrainRun& r, const std::vector<int64_t>& labels) {
  const auto& warn = r.cb.warn;
  for (const auto& w : label_balance_warnings(pick(labels, r.split.train), r.eval.labels(r.data))) warn(w);
  if (!r.m.classifier) return;
  const auto lost = r.eval.unknown_classes(r.data);
  if (lost > 0)
    warn(std::to_string(lost) + " evaluation rows have labels no training row has: the classifier cannot " +
         "predict them and they count as wrong in accuracy_at_k");
}

// Rank 0's outputs after a run that was not interrupted: --out (unless --select-best wrote the best
// already; with no best ever selected, the last model and a warning) and --eval-dump.
void write_final_outputs(TrainRun& r) {
  const TrainOptions& o = r.o;
  const BestRecord& best = r.result.best;
  if (!o.select_best.empty() && best.step < 0 && r.cb.warn)
    r.cb.warn("--select-best: '" + o.select_best +
              "' had no evaluation queries at any evaluation, so no model was selected; --out holds the last one");
  if (o.select_best.empty() || best.step < 0) save_outputs(o, r.m);
  r.eval.write_dump(o);
}

}  // namespace traincache::train
