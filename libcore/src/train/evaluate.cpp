#include "traincache/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

namespace traincache::train {

int64_t block_rows(int64_t candidates) {
  return std::clamp<int64_t>(4'000'000 / std::max<int64_t>(1, candidates), 1, 1024);
}

QueryTable retrieval_table(const torch::Tensor& queries, const torch::Tensor& passages,
                           const std::vector<int64_t>& rows, const std::vector<int64_t>& ks) {
  torch::NoGradGuard no_grad;
  QueryTable t;
  const int64_t n = queries.size(0), block = block_rows(passages.size(0));
  for (int64_t a = 0; a < n; a += block) {
    const int64_t b = std::min(a + block, n);
    auto s = torch::matmul(queries.slice(0, a, b), passages.t());
    auto own =
        s.gather(1, torch::arange(a, b, torch::TensorOptions().dtype(torch::kLong).device(s.device())).unsqueeze(1));
    auto rank = s.gt(own).sum(1).cpu();  // passages scored above the relevant one
    auto r = rank.accessor<int64_t, 1>();
    for (int64_t i = 0; i < b - a; ++i) add_retrieval_row(t, ks, rows[static_cast<std::size_t>(a + i)], r[i]);
  }
  return t;
}

namespace {

// Labelled rows, each a query against all the others: their embeddings, labels and row numbers,
// and the k of the metrics.
struct Labelled {
  const torch::Tensor& e;
  const torch::Tensor& labels;
  const std::vector<int64_t>& rows;
  const std::vector<int64_t>& ks;
};

// One block of labelled queries [a, b): their per-query values appended to `t`.
void labelled_block(QueryTable& t, const Labelled& set, int64_t a, int64_t b) {
  const torch::Tensor &e = set.e, &labels = set.labels;
  const std::vector<int64_t>&rows = set.rows, &ks = set.ks;
  const int64_t n = e.size(0), c = b - a;
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(e.device());
  auto s = torch::matmul(e.slice(0, a, b), e.t());
  auto self = torch::arange(a, b, opts).unsqueeze(1);
  s.scatter_(1, self, -INFINITY);
  auto same = labels.slice(0, a, b).unsqueeze(1).eq(labels.unsqueeze(0));
  same.scatter_(1, self, false);
  auto relevant = same.sum(1);  // R: the other rows of the query's class
  // The nearest row of the class: rows scored strictly above it give its rank.
  auto best = s.masked_fill(same.logical_not(), -INFINITY).amax(1, true);
  auto first = s.gt(best).sum(1);
  const int64_t kmax = ks.back();
  const int64_t depth = std::min(n - 1, std::max(relevant.max().item<int64_t>(), kmax));
  auto rel = same.gather(1, std::get<1>(s.topk(depth, 1))).to(torch::kFloat64);  // [c, depth] by score
  auto pos = torch::arange(1, depth + 1, rel.options()).unsqueeze(0);
  auto within_r = pos.le(relevant.unsqueeze(1).to(torch::kFloat64));
  auto r_den = relevant.to(torch::kFloat64).clamp_min(1);
  auto r_precision = (rel * within_r).sum(1) / r_den;
  auto map_r = (rel * rel.cumsum(1) / pos * within_r).sum(1) / r_den;
  std::vector<torch::Tensor> prec;
  for (auto k : ks) prec.push_back(rel.slice(1, 0, std::min(k, depth)).sum(1) / static_cast<double>(k));
  auto R = relevant.cpu(), F = first.cpu(), L = labels.slice(0, a, b).cpu();
  auto RP = r_precision.cpu(), MR = map_r.cpu();
  auto P = torch::stack(prec, 1).cpu();  // [c, |ks|]
  auto r = R.accessor<int64_t, 1>(), f = F.accessor<int64_t, 1>(), l = L.accessor<int64_t, 1>();
  auto rp = RP.accessor<double, 1>(), mr = MR.accessor<double, 1>();
  auto p = P.accessor<double, 2>();
  for (int64_t i = 0; i < c; ++i) {
    if (r[i] == 0) {
      ++t.excluded;
      continue;
    }
    t.rows.push_back(rows[static_cast<std::size_t>(a + i)]);
    for (std::size_t j = 0; j < ks.size(); ++j)
      t.column("precision_at_" + std::to_string(ks[j]), "precision@" + std::to_string(ks[j]))
          .push_back(p[i][static_cast<int64_t>(j)]);
    t.column("r_precision", "R-precision").push_back(rp[i]);
    t.column("map_at_r", "MAP@R").push_back(mr[i]);
    t.column("label").push_back(static_cast<double>(l[i]));
    t.column("relevant").push_back(static_cast<double>(r[i]));
    t.column("rank").push_back(static_cast<double>(f[i] + 1));
    t.column("reciprocal_rank").push_back(1.0 / static_cast<double>(f[i] + 1));
  }
}

}  // namespace

QueryTable labelled_table(const torch::Tensor& embeddings, const torch::Tensor& labels,
                          const std::vector<int64_t>& rows, const std::vector<int64_t>& ks) {
  torch::NoGradGuard no_grad;
  QueryTable t;
  const int64_t n = embeddings.size(0);
  if (n < 2) {
    t.excluded = n;
    return t;
  }
  auto l = labels.to(embeddings.device());
  const int64_t block = block_rows(n);
  const Labelled set{embeddings, l, rows, ks};
  for (int64_t a = 0; a < n; a += block) labelled_block(t, set, a, std::min(a + block, n));
  return t;
}

void add_classification(QueryTable& t, const torch::Tensor& logits, const torch::Tensor& classes,
                        const std::vector<int64_t>& rows, const std::vector<int64_t>& ks) {
  torch::NoGradGuard no_grad;
  auto y = classes.to(logits.device(), torch::kLong);
  auto known = y.ge(0);
  auto own = logits.gather(1, y.clamp_min(0).unsqueeze(1));
  auto above = logits.gt(own).sum(1).cpu();  // classes scored strictly above the true one
  auto ok = known.cpu();
  auto a = above.accessor<int64_t, 1>();
  auto k_ok = ok.accessor<bool, 1>();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::unordered_map<int64_t, std::size_t> at;
  for (std::size_t i = 0; i < t.rows.size(); ++i) at[t.rows[i]] = i;
  // The new columns (created first: adding a column may move the others), then pointers to them.
  for (auto k : ks) t.column("accuracy_at_" + std::to_string(k), "accuracy@" + std::to_string(k));
  t.column("class_rank");
  std::vector<std::vector<double>*> acc;
  for (auto k : ks) acc.push_back(&t.column("accuracy_at_" + std::to_string(k), "accuracy@" + std::to_string(k)));
  auto& class_rank = t.column("class_rank");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto it = at.find(rows[i]);
    std::size_t j = it != at.end() ? it->second : t.rows.size();
    if (j == t.rows.size()) t.rows.push_back(rows[i]);
    for (auto* col : {&t.values, &t.extra})
      for (auto& c : *col) c.resize(t.rows.size(), nan);
    const auto r = static_cast<double>(a[static_cast<int64_t>(i)]);
    for (std::size_t q = 0; q < ks.size(); ++q)
      (*acc[q])[j] = k_ok[static_cast<int64_t>(i)] && r < static_cast<double>(ks[q]) ? 1.0 : 0.0;
    class_rank[j] = k_ok[static_cast<int64_t>(i)] ? r + 1 : inf;
  }
}

}  // namespace traincache::train
