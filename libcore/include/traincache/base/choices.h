// Named choices: an enum and the one table of the names it is spelled with on command lines, in
// checkpoints and in JSON. Options are parsed into the enum once, at the command line; the library
// works on the enum and never compares or re-validates strings.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "traincache/base/error.h"

namespace traincache {

/// The values of enum E with their names, in the order help and messages list them.
template <class E>
class Choices {
 public:
  Choices(std::initializer_list<std::pair<E, const char*>> entries) : entries_(entries) {}

  /// The name of `value` (every value of E in the table has one).
  const char* name(E value) const {
    for (const auto& [v, n] : entries_)
      if (v == value) return n;
    return "?";
  }

  /// The value called `text`, if any.
  std::optional<E> find(const std::string& text) const {
    for (const auto& [v, n] : entries_)
      if (text == n) return v;
    return std::nullopt;
  }

  /// The value called `text`; throws Error(usage, subject, "expected a, b or c, got 'text'").
  E parse(const std::string& text, const std::string& subject) const {
    if (auto v = find(text)) return *v;
    throw Error(Exit::usage, subject, "expected " + list() + ", got '" + text + "'");
  }

  /// Every name, in table order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.emplace_back(e.second);
    return out;
  }

  /// "a, b or c" (or "a, b, c" with `last` = ", ").
  std::string list(const char* last = " or ") const {
    std::string out;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      out += (i == 0 ? "" : i + 1 == entries_.size() ? last : ", ") + std::string(entries_[i].second);
    return out;
  }

 private:
  std::vector<std::pair<E, const char*>> entries_;
};

}  // namespace traincache
