#include "traincache/text/token_batches.h"

#include <cstdint>
#include <vector>

#include "catch.h"

using namespace traincache;

CATCH_TEST_CASE("token batches: rows and token slots capped, a long row alone", "[fill_plan]") {
  using V = std::vector<int64_t>;
  // No cap: whole batches of batch_size rows.
  CATCH_CHECK(text::token_batches(V{1, 2, 3, 4, 5}, 2, 0) == V{2, 4, 5});
  // 10 token slots: [1, 2, 2] pads to 3 x 2 = 6; adding 4 gives 4 x 4 = 16 > 10, so 4 starts a batch;
  // [4, 5] is 10; 9 alone (one row may exceed the cap).
  CATCH_CHECK(text::token_batches(V{1, 2, 2, 4, 5, 9}, 8, 10) == V{3, 5, 6});
  CATCH_CHECK(text::token_batches(V{300}, 8, 10) == V{1});
  // The row limit still holds under a generous cap.
  CATCH_CHECK(text::token_batches(V{1, 1, 1, 1, 1}, 2, 1000) == V{2, 4, 5});
  // issue 59's case: 480 short texts and one of 256 tokens; a cap of 8,192 slots keeps the long
  // one out of the short ones' batch.
  V lengths(480, 16);
  lengths.push_back(256);
  const V ends = text::token_batches(lengths, 256, 8192);
  CATCH_CHECK(ends == V{256, 480, 481});
  CATCH_CHECK(text::token_batches(V{}, 4, 10).empty());
}

CATCH_TEST_CASE("length batches: rows shortest first, ties in their own order, cut as token_batches", "[fill_plan]") {
  using V = std::vector<int64_t>;
  // Rows 1 and 3 have 2 tokens each and keep their order; 9 tokens come last, alone under 10 slots.
  const text::LengthBatches b = text::length_batches(V{9, 2, 5, 2, 4, 1}, 8, 10);
  CATCH_CHECK(b.order == V{5, 1, 3, 4, 2, 0});
  CATCH_CHECK(b.ends == text::token_batches(V{1, 2, 2, 4, 5, 9}, 8, 10));
  CATCH_CHECK(b.ends == V{3, 5, 6});
  const text::LengthBatches none = text::length_batches(V{}, 4, 10);
  CATCH_CHECK(none.order.empty());
  CATCH_CHECK(none.ends.empty());
}
