#include "wantrain/app/attention_chunk_option.hpp"

#include <fmt/format.h>

#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/util/error.hpp"

namespace wt::app {

int64_t parse_attention_chunk(const std::string& text, const char* option) {
  if (text == "fused") return nn::kFusedAttention;
  if (text == "auto") return nn::kAutoAttentionChunk;
  // Digits only (no sign, no spaces), and few enough for int64: 9 digits is a billion queries.
  if (!text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos)
    return std::stoll(text);
  throw UsageError(fmt::format(
      "option --{}: expected fused, auto, 0 (the whole score matrix) or a number of queries, got '{}'", option, text));
}

std::string attention_chunk_text(int64_t chunk) {
  if (chunk == nn::kFusedAttention) return "fused";
  if (chunk == nn::kAutoAttentionChunk) return "auto";
  return std::to_string(chunk);
}

}  // namespace wt::app
