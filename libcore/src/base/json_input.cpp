#include "traincache/base/json_input.h"

#include "traincache/base/error.h"

namespace traincache {

namespace {

// Thrown by the parser callback; turned into Error once the parser has unwound.
struct TooDeep {};

}  // namespace

nlohmann::json parse_json_input(const std::string& text, const std::string& subject) {
  const auto bound = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (depth >= kMaxJsonDepth &&
        (event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start))
      throw TooDeep{};
    return true;
  };
  try {
    return nlohmann::json::parse(text, bound, false);
  } catch (const TooDeep&) {
    throw Error(Exit::data, subject, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
}

}  // namespace traincache
