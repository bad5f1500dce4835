// The tools' --attention-chunk option: fused|auto|0|Q, as the library's chunk
// (nn/attention_chunk.hpp). wantrain, wansample and wanbench model read it
// alike.
#pragma once

#include <cstdint>
#include <string>

namespace wt::app {

// "fused" -> nn::kFusedAttention, "auto" -> nn::kAutoAttentionChunk, "0" -> 0 (the whole score matrix), "Q"
// (Q >= 1 queries) -> Q; UsageError naming `option` for any other text.
int64_t parse_attention_chunk(const std::string& text, const char* option = "attention-chunk");

// The option's text for a chunk: parse_attention_chunk's inverse.
std::string attention_chunk_text(int64_t chunk);

}  // namespace wt::app
