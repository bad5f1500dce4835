// How attention runs (nn/attention.hpp): the fused kernel
// (kFusedAttention, the default), or over query chunks, choosing when asked
// the whole score matrix while it is small, else chunks whose scores fit a
// budget. A chunk is asked for as kFusedAttention, 0 (the whole
// [B, heads, L, S] matrix), a number of queries, or kAutoAttentionChunk; the
// tools' `--attention-chunk fused|auto|0|Q` maps to these
// (app/attention_chunk_option.hpp).
#pragma once

#include <cstdint>

namespace wt::nn {

// "Choose from the shapes": resolve_attention_chunk at each forward.
constexpr int64_t kAutoAttentionChunk = -1;
// LibTorch's fused scaled_dot_product_attention: no score matrix is ever
// formed, in forward or backward (memory linear in the tokens).
constexpr int64_t kFusedAttention = -2;

// 1 GiB of scores per block. Below it the whole matrix is cheap and the
// fastest path: images and short clips (a Wan2.1-1.3B, 12 heads, up to
// 4,729 tokens at batch 1) and every small model keep full attention, bit
// for bit as before. Above it a chunk's scores stay at 1 GiB whatever the
// token count: chunked backward holds six such [B, heads, Q, S] blocks,
// 6 GiB, a small share of an 80 GB GPU, while chunks keep hundreds of
// queries (192 for a 14B at 480p x 81 frames) for full-speed products.
constexpr int64_t kAttentionScoreBudget = int64_t(1) << 30;

// Bytes per score the budget counts: softmax runs on fp32 scores whatever
// the products' dtype (Wan's arithmetic, and chunked_attention's), so a
// bf16 run forms as many fp32 scores as an fp32 run.
constexpr int64_t kAttentionScoreBytes = 4;

// Chunks are whole multiples of this many queries (and never fewer).
constexpr int64_t kAttentionChunkQuantum = 64;

// The chunk to run `queries` queries against `keys` keys with, for
// `requested` (kFusedAttention, 0, a number of queries, or
// kAutoAttentionChunk). kFusedAttention, a number or 0 is returned as is. Auto: 0 (the whole matrix) when
// batch * heads * queries * keys * score_bytes <= budget, else the largest
// multiple of kAttentionChunkQuantum whose scores
// batch * heads * chunk * keys * score_bytes fit the budget, at least
// kAttentionChunkQuantum. wt::Error for a requested value below -2 or a
// shape that is not positive.
int64_t resolve_attention_chunk(int64_t requested, int64_t batch, int64_t heads, int64_t queries, int64_t keys,
                                int64_t score_bytes = kAttentionScoreBytes, int64_t budget = kAttentionScoreBudget);

}  // namespace wt::nn
