#include "wantrain/util/json.hpp"

#include <fmt/format.h>

namespace wt {

nlohmann::json parse_json(const std::string& text, const nlohmann::json::parser_callback_t& callback) {
  using json = nlohmann::json;
  // nlohmann's parser keeps its own nesting on the heap; what is too deep is
  // dropped as it opens (the callback returns false), so no value deeper
  // than the limit is ever built, then the whole text is refused.
  bool too_deep = false;
  json doc;
  try {
    doc = json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
          depth >= kMaxJsonDepth) {
        too_deep = true;
        return false;
      }
      return too_deep || !callback ? !too_deep : callback(depth, event, parsed);
    });
  } catch (const json::exception& e) {
    // nlohmann quotes the offending token, which a hostile file makes huge.
    std::string what = e.what();
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    throw JsonError(what);
  }
  if (too_deep)
    throw JsonError(fmt::format("nested deeper than {} levels (a corrupt or hostile file?)", kMaxJsonDepth));
  return doc;
}

nlohmann::json parse_json_or_discarded(const std::string& text) {
  try {
    return parse_json(text);
  } catch (const JsonError&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string text = value.dump();
  if (text.size() > max_chars) text = text.substr(0, max_chars) + "...";
  return text;
}

}  // namespace wt
