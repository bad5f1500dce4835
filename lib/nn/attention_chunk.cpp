#include "wantrain/nn/attention_chunk.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wantrain/util/error.hpp"

namespace wt::nn {

int64_t resolve_attention_chunk(int64_t requested, int64_t batch, int64_t heads, int64_t queries, int64_t keys,
                                int64_t score_bytes, int64_t budget) {
  if (requested < kFusedAttention)
    throw Error(fmt::format(
        "attention chunk {}: expected fused, 0 (the whole score matrix), a number of queries or auto", requested));
  if (requested != kAutoAttentionChunk) return requested;
  if (batch < 1 || heads < 1 || queries < 1 || keys < 1 || score_bytes < 1 || budget < 1)
    throw Error(
        fmt::format("attention chunk auto: batch {}, heads {}, {} queries, {} keys, {} bytes a score and a "
                    "budget of {} bytes must all be positive",
                    batch, heads, queries, keys, score_bytes, budget));
  // In double: a token count's square overflows no int64 here, but the product of all five might.
  const double per_query = double(batch) * double(heads) * double(keys) * double(score_bytes);
  if (per_query * double(queries) <= double(budget)) return 0;
  const auto fitting = int64_t(double(budget) / per_query);
  return std::max(kAttentionChunkQuantum, fitting / kAttentionChunkQuantum * kAttentionChunkQuantum);
}

}  // namespace wt::nn
