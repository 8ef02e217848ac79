// The one way the library turns a JSON value into text. nlohmann::json throws on a string that is
// not UTF-8 (type_error.316), and paths are bytes: a file named $'caf\xe9' must give a message,
// a fingerprint and a --json document, not an internal error. Ill-formed bytes become U+FFFD.
#pragma once

#include <string>

namespace traincache {

/// `j` as JSON text (compact, or indented by `indent` spaces), ill-formed UTF-8 in its strings
/// replaced with U+FFFD instead of throwing. Works for nlohmann::json and ordered_json.
template <class Json>
std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace traincache
