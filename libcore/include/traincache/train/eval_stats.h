// Evaluation results without tensors: per-query values of each metric, their means with
// bootstrap confidence intervals, and the per-query dump (gc-train --eval-k, --eval-bootstrap,
// --eval-dump; definitions in docs/gc-train.md, "Metrics"). Torch-free.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace traincache::train {

/// One metric's mean over the queries, with a 95% bootstrap interval (NaN without one).
struct Metric {
  std::string key;    ///< JSON name: recall_at_10, mrr_at_10, map_at_r, ...
  std::string label;  ///< text name: recall@10, MRR@10, MAP@R, ...
  double value = 0;
  double lo = std::numeric_limits<double>::quiet_NaN(), hi = std::numeric_limits<double>::quiet_NaN();
};

/// Per-query results of one evaluation: a column per metric and the dump's extra columns.
struct QueryTable {
  std::vector<int64_t> rows;  ///< the data row of each query
  std::vector<std::string> keys, labels;
  std::vector<std::vector<double>> values;  ///< [metric][query]
  std::vector<std::string> extra_keys;      ///< dump-only columns (rank, reciprocal_rank, ...)
  std::vector<std::vector<double>> extra;   ///< [column][query]
  int64_t excluded = 0;                     ///< queries with nothing to find (a lone label)

  /// Adds a metric column, or a dump-only one when `label` is empty; returns its values.
  std::vector<double>& column(const std::string& key, const std::string& label = "");
};

/// Per-query retrieval metrics from the 0-based rank of each query's one relevant passage
/// (passages scored strictly above it): accuracy/precision/recall@k for each k, MRR@10, NDCG@10,
/// MAP@100 (sentence-transformers' InformationRetrievalEvaluator with one relevant passage).
void add_retrieval_row(QueryTable& t, const std::vector<int64_t>& ks, int64_t row, int64_t rank);

/// Means of every metric column; with bootstrap > 0, a 95% percentile interval from that many
/// resamples of the queries (with replacement, seeded).
std::vector<Metric> summarise(const QueryTable& t, int64_t bootstrap, uint64_t seed);

/// The q-quantile (0..1) of `v` by linear interpolation between order statistics (numpy's
/// default); `v` is sorted in place.
double quantile(std::vector<double>& v, double q);

/// Tab-separated per-query lines of one evaluation at `step` (the header first when asked):
/// step, row, the extra columns, then every metric.
std::string dump_tsv(const QueryTable& t, int64_t step, bool header);

/// Parses --eval-k "1,5,10": positive, distinct, ascending after sorting. Error(usage) otherwise.
std::vector<int64_t> parse_ks(const std::string& text);

}  // namespace traincache::train
