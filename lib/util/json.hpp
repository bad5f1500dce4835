// JSON from files a user or another program wrote (safetensors headers,
// model configs, weight indexes, checkpoint attributes, metrics lines):
// parsed with a nesting limit, and shown in error lines shortened, so that a
// hostile file can neither exhaust the stack (nlohmann::json's dump() and
// comparisons recurse once per level) nor flood the log.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace wt {

// Far deeper than any format wantrain reads (a safetensors header is 3).
inline constexpr int kMaxJsonDepth = 32;

// Invalid JSON, or nested too deep; what() says which (the caller names the file).
struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses `text`; throws JsonError on invalid JSON or nesting deeper than
// kMaxJsonDepth. `callback`, when given, sees every
// parse event as nlohmann's parser callback does.
nlohmann::json parse_json(const std::string& text, const nlohmann::json::parser_callback_t& callback = nullptr);

// As parse_json, but a discarded value instead of an exception.
nlohmann::json parse_json_or_discarded(const std::string& text);

// `value` as compact JSON, cut to about `max_chars` with "..." (for error lines).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace wt
