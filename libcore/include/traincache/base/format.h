// Small text formatters shared by the tools' messages and tables, and the parsing of lists and
// integers in option values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace traincache {

/// "[70000,1,28,28]".
template <class Int>
std::string shape_text(const std::vector<Int>& shape) {
  std::string t = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? "," : "") + std::to_string(shape[i]);
  return t + "]";
}

/// "1.50 GiB", "17.09 MiB", "512 B" (binary units, two decimals).
std::string format_size(uint64_t bytes);

/// "7,150": a count rounded to an integer, its thousands set apart with commas.
std::string format_count(double n);

/// "a, b, c" (", " between names); "none" for an empty list.
std::string name_list(const std::vector<std::string>& names);

/// Levenshtein distance between two strings (for "did you mean" suggestions).
std::size_t edit_distance(const std::string& a, const std::string& b);

/// Splits on `sep`, dropping empty parts.
std::vector<std::string> split(const std::string& s, char sep);

/// The whole string as a base-10 integer, or nullopt (trailing characters, overflow, empty).
std::optional<int64_t> parse_int(const std::string& s);

}  // namespace traincache
