// Small text formatters shared by the tools' messages and tables.
#pragma once

#include <cstdint>
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

}  // namespace traincache
