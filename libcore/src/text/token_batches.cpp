#include "traincache/text/token_batches.h"

#include <algorithm>
#include <numeric>

namespace traincache::text {

std::vector<int64_t> token_batches(const std::vector<int64_t>& sorted_lengths, int64_t batch_size, int64_t max_tokens) {
  std::vector<int64_t> ends;
  const auto n = static_cast<int64_t>(sorted_lengths.size());
  int64_t first = 0;  // the open batch's first row
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rows = i - first + 1;  // with row i, whose length is the batch's longest
    const bool over = rows > batch_size || (max_tokens > 0 && rows > 1 && rows * sorted_lengths[i] > max_tokens);
    if (over) {
      ends.push_back(i);
      first = i;
    }
  }
  if (n > 0) ends.push_back(n);
  return ends;
}

LengthBatches length_batches(const std::vector<int64_t>& lengths, int64_t batch_size, int64_t max_tokens) {
  LengthBatches b;
  b.order.resize(lengths.size());
  std::iota(b.order.begin(), b.order.end(), int64_t{0});
  std::stable_sort(b.order.begin(), b.order.end(), [&](int64_t x, int64_t y) { return lengths[x] < lengths[y]; });
  std::vector<int64_t> sorted;
  sorted.reserve(lengths.size());
  for (const int64_t i : b.order) sorted.push_back(lengths[i]);
  b.ends = token_batches(sorted, batch_size, max_tokens);
  return b;
}

}  // namespace traincache::text
