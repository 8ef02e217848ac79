// JSON read from users' files (tokenizer.json, JSON Lines manifests): nesting is bounded before any
// code walks the document, so a hostile file is refused with a message instead of exhausting the stack.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace traincache {

/// The deepest nesting of arrays and objects accepted in a user's JSON file. Real files nest a few
/// levels (a Hugging Face tokenizer.json about 6); 64 leaves room for any of them.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text`. A syntax error gives a discarded value (is_discarded()), as
/// nlohmann::json::parse(text, nullptr, false) does; arrays and objects nested deeper than
/// kMaxJsonDepth throw Error(data, subject, "JSON nested deeper than 64 levels").
nlohmann::json parse_json_input(const std::string& text, const std::string& subject);

}  // namespace traincache
