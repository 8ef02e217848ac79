#include "traincache/text/token_batches.h"

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

}  // namespace traincache::text
