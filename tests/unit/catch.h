// Catch2 for the unit tests, version 2 (Debian 12, one header) or 3 (Debian 13, a library):
// include this instead of a Catch2 header. Macros are prefixed (CATCH_CHECK, ...: LibTorch defines
// CHECK); `Approx` and `traincache::test::contains_text` mean the same under both versions.
#pragma once

#include <string>

#if TRAINCACHE_CATCH2_MAJOR >= 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif

namespace traincache::test {

/// Matches a string holding `text` (Catch2 2's Matchers::Contains, 3's ContainsSubstring).
inline auto contains_text(const std::string& text) {
#if TRAINCACHE_CATCH2_MAJOR >= 3
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}

}  // namespace traincache::test
