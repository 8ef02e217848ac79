#include "step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>

#include "checkpointer.h"
#include "data.h"
#include "evaluation.h"
#include "models.h"
#include "setup.h"
#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/timing.h"
#include "traincache/text/token_batches.h"
#include "traincache/train/shuffle.h"

namespace traincache::train {

Trainer::Trainer(TrainRun& run, torch::optim::Optimizer& opt, const StepPlan& steps, model::GradScaler& scaler)
    : o_(run.o),
      s_(run.s),
      group_(run.group),
      data_(run.data),
      m_(run.m),
      opt_(opt),
      loss_(run.loss),
      train_(run.split.train),
      n_train_(static_cast<int64_t>(run.split.train.size())),
      steps_(steps),
      scaler_(scaler),
      cb_(run.cb),
      info_(run.info) {
  mode_.gradcache = o_.gradcache;
  if (RankGroup* group = group_) {
    par_.rank = s_.rank;
    par_.all_gather_rows = [group](const torch::Tensor& t, const std::vector<int64_t>& rows) {
      return group->all_gather_rows(t, rows);
    };
    par_.all_reduce_sum = [group](const std::vector<torch::Tensor>& ts) { group->all_reduce_sum(ts); };
  }
}

int64_t Trainer::run(int64_t start, Checkpointer& ckpt, MetricsLog& metrics, MetricsLog& batch_log, TrainResult& result,
                     const std::function<bool(int64_t)>& after_step) {
  // --stream: the next batches' rows are read (and converted) on a thread while a step computes.
  std::unique_ptr<OrderedPrefetcher<BatchInputs>> ahead;
  if (o_.stream)
    ahead = std::make_unique<OrderedPrefetcher<BatchInputs>>(
        steps_.total - start, 1, 2, [this, start, cache = std::make_shared<EpochPerm>()](int64_t k) {
          window_boundary(start, start + k);
          return inputs_of(rows_of_step(start + k, *cache));
        });
  int64_t s = start;
  for (; s < steps_.total; ++s) {
    if (group_ ? stop_all_ : interrupt_requested()) {
      result.interrupted = true;
      break;
    }
    if (!ahead) window_boundary(start, s);
    // The batch's rows: the reader's (it computed them with the inputs), or the loop's own.
    const auto t_wait = Clock::now();
    BatchInputs in = ahead ? ahead->next() : BatchInputs{rows_of_step(s, perm_), {}, {}};
    const double wait_s = seconds_since(t_wait);  // --stream: how long the step waited for its data
    if (data_.window_rows && (s == start || s % steps_.per_epoch == 0)) first_waits_.push_back(wait_s);
    const torch::Tensor idx = in.batch.idx;
    batch_log.write({{"step", s + 1}, {"epoch", s / steps_.per_epoch}, {"rows", row_list(idx)}});
    if (group_) {
      group_->set_context("step " + std::to_string(s + 1));
      const int64_t n = idx.size(0);
      if (n < s_.world) {
        info_("step " + std::to_string(s + 1) + ": skipped: its batch has " + std::to_string(n) +
              " row(s), fewer than the " + std::to_string(s_.world) + " ranks");
        continue;
      }
      par_.rows.clear();
      for (int r = 0; r < s_.world; ++r) par_.rows.push_back((r + 1) * n / s_.world - r * n / s_.world);
    }
    auto t_step = Clock::now();
    double lr = scheduled_lr(o_, s, steps_.total);
    if (!ahead) in = inputs_of(std::move(in.batch));
    double l = step(s, idx, std::move(in), lr, ckpt);
    result.last_loss = l;
    samples_ += idx.size(0);
    double step_s = seconds_since(t_step);
    metrics.write({{"step", s + 1},
                   {"epoch", s / steps_.per_epoch},
                   {"loss", l},
                   {"lr", lr},
                   {"seconds", step_s},
                   {"wait_seconds", wait_s},
                   {"samples_per_second", idx.size(0) / step_s}});
    if (cb_.progress && s_.rank == 0) cb_.progress(s + 1, steps_.total, l);
    const bool stop = after_step(s + 1);
    if (ckpt.enabled() && o_.checkpoint_every > 0 && (s + 1) % o_.checkpoint_every == 0) {
      ckpt.save(s + 1, m_.params, opt_);
      result.checkpoint = ckpt.path();
    }
    if (stop) {
      result.stopped_early = true;
      return s + 1;
    }
  }
  return s;
}

std::vector<WindowEpoch> Trainer::window_epochs() const {
  std::lock_guard<std::mutex> lk(boundaries_mu_);
  std::vector<WindowEpoch> out;
  for (std::size_t i = 0; i < boundaries_.size() && i < first_waits_.size(); ++i) {
    out.push_back(boundaries_[i]);
    out.back().wait_seconds = first_waits_[i];
  }
  return out;
}

Trainer::Batch Trainer::rows_of_step(int64_t s, EpochPerm& cache) const {
  const bool window = data_.window_rows != nullptr;
  const int64_t n = window ? data_.window.cache_num : n_train_;
  int64_t epoch = s / steps_.per_epoch, b = s % steps_.per_epoch;
  if (o_.shuffle && epoch != cache.epoch) {
    std::vector<int64_t>().swap(cache.perm);  // freed before the next one is drawn
    cache.epoch = epoch;
    cache.perm = train::seeded_permutation(n, o_.seed * 1000003ull + static_cast<uint64_t>(epoch));
  }
  const int64_t first = b * o_.batch_size, end = std::min((b + 1) * o_.batch_size, n);
  Batch out{torch::empty({end - first}, torch::kLong), {}};
  auto* rows = out.idx.data_ptr<int64_t>();
  for (int64_t i = first; i < end; ++i) {
    const int64_t p = o_.shuffle ? cache.perm[static_cast<std::size_t>(i)] : i;
    if (!window) {
      rows[i - first] = train_[static_cast<std::size_t>(p)];
      continue;
    }
    const int64_t key = data_.window.first_key(epoch) + p;
    out.keys.push_back(key);
    rows[i - first] = (*data_.window_rows)[static_cast<std::size_t>(key % data_.window.dataset_len)];
  }
  return out;
}

void Trainer::window_boundary(int64_t start, int64_t s) {
  if (!data_.window_rows || !(s == start || s % steps_.per_epoch == 0)) return;
  const int64_t e = s / steps_.per_epoch;
  const bool next = (e + 1) * steps_.per_epoch < steps_.total;
  WindowEpoch w;
  w.epoch = e;
  for (Side* side : sides(data_))
    for (Rows* r : side->datasets())
      if (data_cache::WindowCache* window = r->window())
        w.late_rows = std::max(w.late_rows, window->begin_epoch(e, false, next).late);
  std::lock_guard<std::mutex> lk(boundaries_mu_);
  boundaries_.push_back(w);
}

namespace {

// A text side trimmed per chunk: its rows' token counts (the attention mask's sums), so that its
// chunks hold texts of like length and at most `max_tokens` token slots (-1: the device's default).
void by_length(train::SideBatch& side, int64_t max_tokens) {
  const auto counts = side.inputs.at(1).sum(1).to(torch::kCPU, torch::kInt64).contiguous();
  side.lengths.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
  side.max_tokens = max_tokens >= 0         ? max_tokens
                    : side.device.is_cuda() ? text::kDefaultMaxTokensCuda
                                            : text::kDefaultMaxTokensCpu;
}

// Why a step's loss is not finite, as far as its inputs tell: the data rows of `own` (this
// process's share of the batch) whose inputs hold NaN or infinity (a side with hard negatives has
// each row followed by its negatives), else that none does and training diverged.
std::string non_finite_inputs(const torch::Tensor& own, const std::vector<torch::Tensor>& query,
                              const std::vector<torch::Tensor>& passage) {
  const std::vector<int64_t> rows = row_list(own);
  std::set<int64_t> bad;
  for (const auto* side : {&query, &passage})
    for (const auto& x : *side) {
      if (!x.is_floating_point() || rows.empty() || x.size(0) < static_cast<int64_t>(rows.size())) continue;
      const int64_t per = x.size(0) / static_cast<int64_t>(rows.size());
      const auto at = (~torch::isfinite(x.reshape({x.size(0), -1})).all(1)).nonzero().reshape({-1}).to(torch::kCPU);
      for (int64_t i = 0; i < at.numel(); ++i) bad.insert(rows[static_cast<std::size_t>(at[i].item<int64_t>() / per)]);
    }
  if (bad.empty()) return "no input of the batch holds NaN or infinity: training diverged (lower --lr, or --clip-norm)";
  std::string list;
  for (auto it = bad.begin(); it != bad.end() && std::distance(bad.begin(), it) < 5; ++it)
    list += (list.empty() ? "" : ", ") + std::to_string(*it);
  return "the inputs of data row(s) " + list + (bad.size() > 5 ? ", ..." : "") + " (" + std::to_string(bad.size()) +
         " in the batch) hold NaN or infinity (cache-fill never stores such rows: a damaged or foreign file?)";
}

}  // namespace

torch::Tensor Trainer::own_rows(const torch::Tensor& idx) const {
  if (!group_) return idx;
  const int64_t n = idx.size(0);
  if (n < s_.world) return idx.slice(0, 0, 0);
  return idx.slice(0, s_.rank * n / s_.world, (s_.rank + 1) * n / s_.world);
}

Trainer::BatchInputs Trainer::inputs_of(Batch b) const {
  const torch::Tensor own = own_rows(b.idx);
  if (own.numel() == 0) return {std::move(b), {}, {}};
  std::vector<int64_t> keys;  // the share's keys: the same slice of the batch
  if (!b.keys.empty()) {
    const int64_t n = b.idx.size(0), r = group_ ? s_.rank : 0;
    const int64_t lo = group_ ? r * n / s_.world : 0;
    keys.assign(b.keys.begin() + lo, b.keys.begin() + lo + own.size(0));
  }
  const auto* k = keys.empty() ? nullptr : &keys;
  auto q = data_.query->inputs(own, false, k);
  auto p = m_.grouped ? std::vector<torch::Tensor>{} : data_.passage->inputs(own, true, k);
  return {std::move(b), std::move(q), std::move(p)};
}

double Trainer::step(int64_t s, const torch::Tensor& idx, BatchInputs in, double lr, const Checkpointer& ckpt) {
  for (auto& g : opt_.param_groups()) g.options().set_lr(lr);
  opt_.zero_grad();
  const auto device = m_.params[0].device();  // where the towers run
  train::SideBatch qb{m_.q_tower, std::move(in.query), o_.query_chunk, device};
  train::SideBatch pb{m_.p_tower, std::move(in.passage), o_.passage_chunk, device};
  if (m_.q_by_length) by_length(qb, o_.max_tokens);
  if (m_.p_by_length && !pb.inputs.empty()) by_length(pb, o_.max_tokens);
  // The whole batch's labels (every rank scores its anchors against all rows); classes for a classifier.
  torch::Tensor labels =
      m_.grouped ? (m_.classifier ? data_.classes : data_.labels).index_select(0, idx).to(m_.params[0].device())
                 : torch::Tensor();
  train::LossConfig loss = loss_;
  loss.grad_scale = scaler_.scale();  // fp16: the loss scaled, the gradients unscaled below
  double l = train::gradcache_step(qb, pb, labels, loss, mode_, group_ ? &par_ : nullptr);
  if (group_) {
    // The one all-reduce of parameter gradients per step; an interrupt flag rides along.
    std::vector<torch::Tensor> sums;
    for (auto& p : m_.params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      sums.push_back(p.grad());
    }
    auto flag = torch::full({1}, interrupt_requested() ? 1.0 : 0.0,
                            torch::TensorOptions().dtype(m_.params[0].dtype()).device(m_.params[0].device()));
    sums.push_back(flag);
    group_->all_reduce_sum(sums);
    stop_all_ = flag.item<double>() > 0;
  }
  if (!std::isfinite(l))
    throw Error(Exit::data, "step " + std::to_string(s),
                "loss is " + std::string(std::isnan(l) ? "NaN" : "infinite") + "; " +
                    non_finite_inputs(own_rows(idx), qb.inputs, pb.inputs) +
                    (ckpt.enabled() ? "; the last good checkpoint is kept in " + ckpt.path() : ""));
  const double scale = scaler_.scale();
  if (!scaler_.update(scaler_.unscale(m_.params))) {  // the same decision on every rank: summed gradients
    char buf[128];
    std::snprintf(buf, sizeof buf, "step %lld: gradients overflow float16 at loss scale %g: step skipped, scale halved",
                  static_cast<long long>(s + 1), scale);
    if (s_.rank == 0 && info_) info_(buf);
    opt_.zero_grad();
    return l;
  }
  if (o_.clip_norm > 0) torch::nn::utils::clip_grad_norm_(m_.params, o_.clip_norm);
  opt_.step();
  return l;
}

}  // namespace traincache::train
