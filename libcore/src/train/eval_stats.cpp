#include "traincache/train/eval_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "traincache/base/error.h"
#include "traincache/base/splitmix.h"

namespace traincache::train {

std::vector<double>& QueryTable::column(const std::string& key, const std::string& label) {
  if (label.empty()) {
    auto it = std::find(extra_keys.begin(), extra_keys.end(), key);
    if (it != extra_keys.end()) return extra[static_cast<std::size_t>(it - extra_keys.begin())];
    extra_keys.push_back(key);
    extra.emplace_back();
    return extra.back();
  }
  auto it = std::find(keys.begin(), keys.end(), key);
  if (it != keys.end()) return values[static_cast<std::size_t>(it - keys.begin())];
  keys.push_back(key);
  labels.push_back(label);
  values.emplace_back();
  return values.back();
}

void add_retrieval_row(QueryTable& t, const std::vector<int64_t>& ks, int64_t row, int64_t rank) {
  t.rows.push_back(row);
  const double r = static_cast<double>(rank);
  for (auto k : ks) t.column("accuracy_at_" + std::to_string(k), "accuracy@" + std::to_string(k)).push_back(rank < k);
  for (auto k : ks)
    t.column("precision_at_" + std::to_string(k), "precision@" + std::to_string(k))
        .push_back(rank < k ? 1.0 / static_cast<double>(k) : 0.0);
  for (auto k : ks) t.column("recall_at_" + std::to_string(k), "recall@" + std::to_string(k)).push_back(rank < k);
  t.column("mrr_at_10", "MRR@10").push_back(rank < 10 ? 1.0 / (r + 1) : 0.0);
  t.column("ndcg_at_10", "NDCG@10").push_back(rank < 10 ? 1.0 / std::log2(r + 2) : 0.0);
  t.column("map_at_100", "MAP@100").push_back(rank < 100 ? 1.0 / (r + 1) : 0.0);
  t.column("rank").push_back(r + 1);
  t.column("reciprocal_rank").push_back(1.0 / (r + 1));
}

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto i = static_cast<std::size_t>(std::floor(pos));
  const double frac = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] + frac * (v[i + 1] - v[i]) : v[i];
}

std::vector<Metric> summarise(const QueryTable& t, int64_t bootstrap, uint64_t seed) {
  const std::size_t n = t.rows.size(), m = t.keys.size();
  std::vector<Metric> out(m);
  for (std::size_t j = 0; j < m; ++j) {  // NaN: the metric does not apply to that query
    out[j].key = t.keys[j];
    out[j].label = t.labels[j];
    double sum = 0, count = 0;
    for (double x : t.values[j])
      if (!std::isnan(x)) sum += x, ++count;
    out[j].value = count > 0 ? sum / count : 0.0;
  }
  if (bootstrap <= 0 || n == 0) return out;
  // One draw of query indices per resample serves every metric, so intervals stay comparable.
  SplitMix rng{seed ^ 0xb0075742ull};
  std::vector<std::vector<double>> means(m, std::vector<double>(static_cast<std::size_t>(bootstrap)));
  std::vector<double> sums(m), counts(m);
  for (int64_t b = 0; b < bootstrap; ++b) {
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(counts.begin(), counts.end(), 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const auto q = static_cast<std::size_t>(rng.below(n));
      for (std::size_t j = 0; j < m; ++j)
        if (!std::isnan(t.values[j][q])) sums[j] += t.values[j][q], ++counts[j];
    }
    for (std::size_t j = 0; j < m; ++j)
      means[j][static_cast<std::size_t>(b)] = counts[j] > 0 ? sums[j] / counts[j] : out[j].value;
  }
  for (std::size_t j = 0; j < m; ++j) {
    out[j].lo = quantile(means[j], 0.025);
    out[j].hi = quantile(means[j], 0.975);
  }
  return out;
}

std::string dump_tsv(const QueryTable& t, int64_t step, bool header) {
  std::ostringstream s;
  if (header) {
    s << "step\trow";
    for (const auto& k : t.extra_keys) s << '\t' << k;
    for (const auto& k : t.keys) s << '\t' << k;
    s << '\n';
  }
  char buf[32];
  auto num = [&](double x) {
    std::snprintf(buf, sizeof buf, "%.10g", x);
    return buf;
  };
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    s << step << '\t' << t.rows[i];
    for (const auto& col : t.extra) s << '\t' << num(col[i]);
    for (const auto& col : t.values) s << '\t' << num(col[i]);
    s << '\n';
  }
  return s.str();
}

std::vector<int64_t> parse_ks(const std::string& text) {
  std::vector<int64_t> ks;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    long long k = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || k <= 0)
      throw Error(Exit::usage, "--eval-k", "'" + item + "' is not a positive integer (give a list such as 1,5,10)");
    ks.push_back(k);
  }
  if (ks.empty()) throw Error(Exit::usage, "--eval-k", "is empty (give a list such as 1,5,10)");
  std::sort(ks.begin(), ks.end());
  if (std::adjacent_find(ks.begin(), ks.end()) != ks.end())
    throw Error(Exit::usage, "--eval-k", "lists a cut-off twice");
  return ks;
}

}  // namespace traincache::train
