// The evaluators of gc-train (docs/gc-train.md, "Metrics"): per-query metrics of embeddings,
// computed a block of queries at a time so that the full score matrix never exists. Needs LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "traincache/train/eval_stats.h"

namespace traincache::train {

/// Retrieval: query i (row rows[i]) against every row of `passages`, its relevant passage being
/// passages[i]. Scores are dot products (normalise first for cosine).
QueryTable retrieval_table(const torch::Tensor& queries, const torch::Tensor& passages,
                           const std::vector<int64_t>& rows, const std::vector<int64_t>& ks);

/// Labelled embeddings, leave one out: each row against every other row, the relevant ones being
/// those of its label. precision@k for each k, R-precision and MAP@R (pytorch-metric-learning's
/// definitions); a row alone in its class has nothing to find and is excluded (counted).
QueryTable labelled_table(const torch::Tensor& embeddings, const torch::Tensor& labels,
                          const std::vector<int64_t>& rows, const std::vector<int64_t>& ks);

/// A classifier's top-k accuracy on rows `rows` with logits [n, C] and true classes [n] (-1: a
/// class the classifier lacks, never right): accuracy_at_k = 1 when fewer than k classes score
/// strictly above the true one. Merged into `t` by row: rows `t` lacks (alone in their class)
/// are appended with NaN (not applicable) in its other columns; dump column class_rank.
void add_classification(QueryTable& t, const torch::Tensor& logits, const torch::Tensor& classes,
                        const std::vector<int64_t>& rows, const std::vector<int64_t>& ks);

/// Query rows per block so that a block's scores against `candidates` rows stay near 4M values.
int64_t block_rows(int64_t candidates);

}  // namespace traincache::train
