// Batches of texts by token count: rows sorted by length, cut so that padding stays a small share.
// Torch-free; cache-fill's length windows and gc-train's text chunks use it.
#pragma once

#include <cstdint>
#include <vector>

namespace traincache::text {

/// --max-tokens' default: token slots per batch of a length window, on a CPU and on a CUDA device
/// (docs/performance.md, "Batches by tokens": on a CPU small batches run as fast per token as
/// large ones and pad less; a GPU needs large ones to be busy).
inline constexpr int64_t kDefaultMaxTokensCpu = 1024;
inline constexpr int64_t kDefaultMaxTokensCuda = 32768;

/// The batches of a length window whose rows are sorted by token count (`sorted_lengths`,
/// ascending): where each ends (exclusive), in order. A batch holds at most `batch_size` rows and,
/// unless it is a single row, at most `max_tokens` token slots: its rows times its longest (the
/// last) row's tokens, as it is padded. `max_tokens` 0: batches of `batch_size` rows.
std::vector<int64_t> token_batches(const std::vector<int64_t>& sorted_lengths, int64_t batch_size, int64_t max_tokens);

/// Rows encoded by their token count: `order` lists the rows shortest first (a stable sort: rows
/// of one length keep their order) and `ends` where each batch of that order ends, as
/// token_batches cuts it.
struct LengthBatches {
  std::vector<int64_t> order, ends;
};
/// The batches of rows of `lengths` tokens (in the rows' own order): cache-fill's length windows
/// and gc-train's text chunks.
LengthBatches length_batches(const std::vector<int64_t>& lengths, int64_t batch_size, int64_t max_tokens);

}  // namespace traincache::text
