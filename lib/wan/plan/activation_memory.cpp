#include "wantrain/wan/plan/activation_memory.hpp"

#include <algorithm>
#include <cmath>

#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/wan/model/patches.hpp"
#include "wantrain/wan/model/weight_names.hpp"

namespace wt::wan {
namespace {

// Bytes a block keeps for backward, split by what they scale with: per
// token of the sample (x), per context position (context) and per element of
// the attention scores [heads, L, L + text_len] (scores, full attention
// only). Each term is a tensor of wan_model.cpp's forward that an op saves
// (LayerNorm and Linear their input, a product its factors, GELU its input,
// softmax its output); tensors saved twice are counted once, and the
// [B, L, 1] statistics of the norms are left out (1/dim of a term). Fused
// attention saves what chunked attention saves: its inputs, its output and
// each row's log-sum-exp (1/d of a term).
struct BlockPart {
  double per_token = 0, per_context = 0, per_score = 0;
};
struct BlockBytes {
  BlockPart self_attention, cross_attention, feed_forward;
};

BlockBytes block_bytes(const WanConfig& c, bool autocast, bool chunked, bool fused) {
  // The heads' output reshaped for o is a copy, except after the fused
  // kernel, which lays its output out as [B, L, heads, d] already (a view).
  const double copy_for_o = fused ? 0 : 1;
  const double d = double(c.dim), ffn = double(c.ffn_dim);
  const double f = 4;                 // fp32: the residual stream, norms and modulation are fp32 in any run
  const double a = autocast ? 2 : 4;  // what Linear and matmul produce
  BlockBytes b;
  auto& self = b.self_attention;
  auto& cross = b.cross_attention;
  auto& ff = b.feed_forward;
  // Full attention: softmax's output (and its cast); per [L, L] (self) or [L, text_len] (cross) score.
  self.per_score = cross.per_score = chunked ? 0 : (autocast ? f + a : f);
  if (!autocast) {
    // q and k of self-attention: Linear's output (the fused RMSNorm's
    // input) and what attention saves: RoPE's output (chunked), or matmul's
    // contiguous copy of it (full). RoPE saves nothing of its input.
    const double qk = c.qk_norm ? 2 : 1;
    // Self-attention: the block input (norm1's), norm1's output (a factor of
    // the modulation), the modulated input (q, k, v's), q, k, v (or its
    // copy), the heads' output reshaped for o (a copy), o's output (a
    // factor of the gate); chunked attention also saves its output.
    self.per_token = d * f * (1 + 1 + 1 + 2 * qk + 1 + copy_for_o + 1 + (chunked ? 1 : 0));
    // Cross-attention: its input x (norm3's), norm3's output (q's input),
    // q (Linear's output, the RMSNorm's input, and the scaled q attention
    // saves or matmul's copy of it), the heads' output copy (chunked: and
    // the output); k and v over the context alike.
    cross.per_token = d * f * (1 + (c.cross_attn_norm ? 1 : 0) + (c.qk_norm ? 2 : 1) + copy_for_o + (chunked ? 1 : 0));
    cross.per_context = d * f * ((c.qk_norm ? 2 : 1) + 1);
    // Feed-forward: x (norm2's), norm2's output, the modulated input, the
    // first Linear's output (GELU's input), GELU's output, the second's.
    ff.per_token = d * f * 4 + 2 * ffn * f;
    return b;
  }
  // Under autocast each Linear casts its fp32 input to a copy in the compute
  // dtype and saves that; RMSNorm and RoPE work in fp32 (model code). q and
  // k of self-attention: RMSNorm's fp32 input, its product in the compute
  // dtype, its fp32 output (RoPE's input), and for chunked attention RoPE's
  // fp32 output and its cast; for full attention matmul's cast copy.
  const double qk = (c.qk_norm ? f + a : 0) + f + (chunked ? f + a : a);
  // Self-attention: block input, norm1's output (fp32), three cast copies of
  // the modulated input (one per Linear), q, k, v, the output copy for o,
  // o's output, and chunked attention's output.
  self.per_token = d * (f + f + 3 * a + 2 * qk + a + copy_for_o * a + a + (chunked ? a : 0));
  // Cross-attention: x (norm3's), the cast of q's input, q (RMSNorm's fp32
  // input and product, then the cast or copy attention saves), the output
  // copy for o (chunked: and the output). Context: k as q, and v.
  const double q_or_k = c.qk_norm ? f + a + a : a;
  cross.per_token = d * (f + a + q_or_k + copy_for_o * a + (chunked ? a : 0));
  cross.per_context = d * (q_or_k + a);
  // Feed-forward: x and norm2's output (fp32), the cast, GELU's input and
  // output and the second Linear's output in the compute dtype.
  ff.per_token = d * (f + f + a + a) + 2 * ffn * a;
  return b;
}

// Tokens per sample: the patch grid's cells (a Fun-Control V1.1 model's
// reference picture is one frame more).
int64_t token_count(const WanConfig& c, const ActivationSettings& s) {
  const auto grid = token_grid(at::IntArrayRef(s.latents.data(), 3), c.patch_size);
  return (grid[0] + (c.ref_conv ? 1 : 0)) * grid[1] * grid[2];
}

}  // namespace

int64_t planned_attention_chunk(const WanConfig& c, const ActivationSettings& s) {
  const int64_t tokens = token_count(c, s);
  // As WanModel::attention_chunk_for: a sequence-parallel rank attends with its share of the heads.
  return nn::resolve_attention_chunk(s.attention_chunk, s.batch,
                                     c.num_heads / std::max<int64_t>(1, s.sequence_parallel), tokens, tokens);
}

ActivationMemory activation_memory(const WanConfig& c, const ActivationSettings& s) {
  ActivationMemory m;
  m.tokens = token_count(c, s);
  m.attention_chunk = planned_attention_chunk(c, s);
  const bool autocast = s.compute_dtype != at::kFloat;
  // Fused and chunked attention keep the same tensors; fused forms no scores at all.
  const bool fused = m.attention_chunk == nn::kFusedAttention;
  const bool chunked = m.attention_chunk != 0;
  const int64_t sp = std::max<int64_t>(1, s.sequence_parallel);
  m.rank_tokens = (m.tokens + sp - 1) / sp;
  // Per token, this rank's tokens; per score, its 1/sp of the heads over
  // every token (queries and keys).
  const double batch = double(s.batch), tokens = double(m.rank_tokens), context = double(c.text_len);
  const double all_tokens = double(m.tokens);
  const double d = double(c.dim), heads = double(c.num_heads) / double(sp), f = 4, a = autocast ? 2 : 4;

  auto b = block_bytes(c, autocast, chunked, fused);
  // Bytes of one part for the batch: per token, per context position, per score.
  auto bytes = [&](const BlockPart& part, double score_columns) {
    return batch *
           (part.per_token * tokens + part.per_context * context + part.per_score * heads * all_tokens * score_columns);
  };
  // Per-token timesteps: a block's modulation + e0 is a [B, L, 6, dim] fp32
  // sum whose gates (views of it) the residual products save, so it lives
  // on; and (1 + scale) of the two modulated norms, [B, L, dim] each. With
  // one timestep per sample all of these are [B, 1, ...]: left out.
  if (s.per_token_timesteps) b.self_attention.per_token += d * f * (6 + 2);
  const double self_attention = bytes(b.self_attention, all_tokens);
  const double after_self_attention = bytes(b.cross_attention, context) + bytes(b.feed_forward, 0);
  m.block_saved = self_attention + after_self_attention;
  m.checkpointed_block_saved = batch * tokens * d * f;  // the recomputation's input
  const int64_t every = s.grad_checkpoint_every;
  // Backward frees each block's tensors as it passes; recomputing a
  // checkpointed block adds its tensors to those of the blocks before it.
  // A VACE model runs its VACE block n right after base block
  // vace_layers[n], checkpointed (and offloaded) by n's place as base
  // blocks by theirs; its hint is added and not kept.
  auto kept = [&](int64_t block) { return every == 0 || block % every != 0; };
  // Offloaded, a checkpointed block's input is in host memory until its
  // recomputation, the one before it on its way back meanwhile.
  const double recomputing = (s.offload_checkpointed ? 2 : 1) * m.checkpointed_block_saved;
  const double checkpointed_held = s.offload_checkpointed ? 0 : m.checkpointed_block_saved;
  double held = 0;  // by the blocks run so far, at the end of forward
  auto run_block = [&](bool keep) {
    if (!keep) {
      m.blocks = std::max(m.blocks, held + recomputing + m.block_saved);
      ++m.blocks_checkpointed;
    } else {
      ++m.blocks_kept;
    }
    held += keep ? m.block_saved : checkpointed_held;
  };
  size_t next_vace = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    run_block(kept(i));
    if (next_vace < c.vace_layers.size() && c.vace_layers[next_vace] == i) run_block(kept(int64_t(next_vace++)));
  }
  m.blocks = std::max(m.blocks, held);
  if (s.offload_checkpointed) m.offloaded = double(m.blocks_checkpointed) * m.checkpointed_block_saved;

  // Outside the blocks: the latents, noise, noisy input and target, the
  // output and the loss's difference ([B, C, F, H, W] fp32 each); the
  // context as loaded, padded and embedded (Linear, GELU, output); the head's
  // input, norm and modulated input.
  const double latent = double(c.in_dim) * double(s.latents[0] * s.latents[1] * s.latents[2]) * f;
  const double text = context * (double(c.text_dim) * (f + f) + d * 3 * a);
  m.outside_blocks = batch * (6 * latent + text + tokens * d * f * 3);
  // VACE: the context as loaded and its patch-embedded tokens.
  if (c.vace())
    m.outside_blocks +=
        batch * (double(c.vace_in_dim) * double(s.latents[0] * s.latents[1] * s.latents[2]) * f + tokens * d * f);
  // Per-token timesteps: the time embedding's tensors per token (the
  // sinusoid, the MLP's inputs, e and e0 [L, 6 dim]) and the head's
  // modulation (its [L, 2, dim] sum and 1 + scale), all fp32.
  if (s.per_token_timesteps)
    m.outside_blocks += batch * tokens * f * (double(c.freq_dim) + d * (2 + 1 + 1 + 6) + d * (2 + 1));

  // The largest working set beyond what is saved, in the last block (or the
  // one being recomputed): the gradient along the residual stream and into a
  // branch, plus the largest of
  // - feed-forward backward: the gradients of GELU's output and input;
  // - self-attention backward, which runs after the feed-forward's and
  //   cross-attention's saved tensors are freed: full attention's two
  //   [heads, L, L] gradients, or one chunk's fp32 scores,
  //   probabilities, their gradient and two temporaries (six [heads, Q, L])
  //   with the gradients of q, k, v and the output (fused: those gradients,
  //   its tiles being a few hundred KiB a thread);
  // - self-attention forward, before the rest of the block is saved: the
  //   scores (full) or one chunk's scores, shifted and exponentiated.
  const double chunk_scores = fused ? 0.0 : heads * double(std::min(m.attention_chunk, m.tokens)) * all_tokens * f;
  const double full_scores = heads * all_tokens * all_tokens * f;
  const double residual = 2 * tokens * d * f;
  const double feed_forward = 2 * tokens * double(c.ffn_dim) * a;
  // Fused backward writes dq, dk and dv in the products' dtype; chunked
  // backward also casts dO and accumulates dk and dv in fp32.
  const double attention_backward = fused     ? tokens * d * 3 * a
                                    : chunked ? 6 * chunk_scores + tokens * d * (a + f + f + a)
                                              : 2 * full_scores;
  const double attention_forward = chunked ? 3 * chunk_scores : 2 * full_scores;
  // Autocast casts each fp32 weight of a Linear (and the patch embedding's
  // convolution) once per forward, and the copy is kept until backward is
  // done (cached, or saved by the Linear for a frozen weight): a kept
  // block's until its backward, a checkpointed block's only while backward
  // recomputes it (its no-grad forward keeps none). The time embedding runs
  // in fp32; biases (1/dim of a weight) are left out.
  if (autocast) {
    double embeddings = 0, block_weights = 0;
    for (const auto& [name, shape] : parameter_shapes(c)) {
      const double bytes = double(element_count(shape)) * a;
      if (shape.size() < 2) continue;  // biases and norms
      if (name.rfind("blocks.0.", 0) == 0 && !block_linear(name).empty() && s.block_linear_dtype == at::kFloat)
        block_weights += bytes;
      else if (name.rfind("text_embedding.", 0) == 0 || name.rfind("patch_embedding.", 0) == 0)
        embeddings += bytes;
    }
    m.weight_casts = embeddings + block_weights * double(m.blocks_kept + (m.blocks_checkpointed > 0 ? 1 : 0));
  }
  // Sequence parallelism: q, k and v's send and receive buffers of the exchange.
  const double exchange = sp > 1 ? 6 * tokens * d * a : 0;
  m.temporary =
      batch * (residual + exchange) + std::max({batch * feed_forward, batch * attention_backward - after_self_attention,
                                                batch * attention_forward - after_self_attention, 0.0});
  return m;
}

double inference_memory(const WanConfig& c, const ActivationSettings& s) {
  const int64_t chunk = planned_attention_chunk(c, s);
  const double batch = double(s.batch), tokens = double(token_count(c, s));
  const double d = double(c.dim), heads = double(c.num_heads), f = 4, a = s.compute_dtype != at::kFloat ? 2 : 4;
  // In flight inside a block: the residual stream, the normed and modulated
  // input, q, k, v, RoPE's outputs and the attention output (eight fp32
  // [B, L, dim] at most), plus the largest op: the feed-forward's hidden
  // activations, or attention's scores (a chunk's, shifted and
  // exponentiated, or the whole matrix and its softmax).
  // With a sequence split (Ulysses) each rank holds its 1/N of the tokens
  // and attends over all of them with 1/N of the heads; the all-to-all's
  // buffers hold two more [L / N, dim].
  const double ranks = double(std::max<int64_t>(1, s.sequence_parallel));
  const double rank_tokens = std::ceil(tokens / ranks), rank_heads = heads / ranks;
  const double block = (8 + (ranks > 1 ? 2 : 0)) * rank_tokens * d * f;
  const double feed_forward = 2 * rank_tokens * double(c.ffn_dim) * a;
  const double attention = chunk == nn::kFusedAttention ? 0.0
                           : chunk > 0 ? 3 * rank_heads * double(std::min(chunk, int64_t(tokens))) * tokens * f
                                       : 2 * rank_heads * tokens * tokens * f;
  // Outside the blocks: the context as given, padded and embedded, and the
  // latents in and out.
  const double latent = double(c.in_dim) * double(s.latents[0] * s.latents[1] * s.latents[2]) * f;
  double outside = double(c.text_len) * (double(c.text_dim) * 2 * f + d * 3 * a) + 3 * latent;
  // VACE: the context, and the tokens the VACE blocks carry beside the latents' and their first input.
  if (c.vace())
    outside += double(c.vace_in_dim) * double(s.latents[0] * s.latents[1] * s.latents[2]) * f + 2 * rank_tokens * d * f;
  return batch * (block + std::max(feed_forward, attention) + outside);
}

}  // namespace wt::wan
