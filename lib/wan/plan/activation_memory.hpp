// How many bytes a WanModel's training step holds for backward, worked out
// from the model's shapes: the tensors each op of the forward saves for its
// backward (docs/model.md, "Activation memory", lists them), counted at the
// batch and token count of a run, plus the largest temporary of the step.
// The memory plan (wan/plan/memory_plan.hpp) adds the model state around it.
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>

#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct ActivationSettings {
  int64_t batch = 1;                          // samples per micro-step
  std::array<int64_t, 3> latents{};           // latent frames, height, width (F, H, W); tokens follow from the patch
  at::ScalarType compute_dtype = at::kFloat;  // kFloat, or the autocast dtype (kBFloat16, kHalf)
  // WanModel::set_attention_chunk: nn::kFusedAttention (the fused kernel),
  // 0 all queries at once, a number of queries, or nn::kAutoAttentionChunk
  // (resolved as the model resolves it)
  int64_t attention_chunk = nn::kFusedAttention;
  int64_t grad_checkpoint_every = 0;  // WanModel::set_grad_checkpoint; 0: none
  // WanModel::set_activation_offload: the checkpointed blocks' inputs in
  // host memory, two of them on the device at once in backward.
  bool offload_checkpointed = false;
  at::ScalarType block_linear_dtype = at::kFloat;  // the blocks' Linear weights (a LoRA base: kBFloat16)
  // Timesteps per token (Wan2.2 TI2V's first-frame condition): the time
  // embedding and every block's modulation are [B, L, ...], not [B, 1, ...].
  bool per_token_timesteps = false;
  // Ranks of a sequence-parallel group (WanModel::set_sequence_parallel):
  // each holds ceil(L / N) tokens' activations and attends with 1/N of the
  // heads over all L tokens; the latents, context and output stay whole.
  int64_t sequence_parallel = 1;
};

struct ActivationMemory {
  int64_t tokens = 0;                   // per sample: the patch grid's cells
  int64_t rank_tokens = 0;              // of them this rank's (sequence parallelism: padded, ÷ N)
  int64_t attention_chunk = 0;          // as the model runs it: auto resolved; 0 the whole score matrix, or fused
  double block_saved = 0;               // bytes one block keeps for backward without checkpointing
  double checkpointed_block_saved = 0;  // with checkpointing: its input only
  int64_t blocks_kept = 0, blocks_checkpointed = 0;
  double outside_blocks = 0;  // embeddings, head, the batch's latents, noise, target and context
  double blocks = 0;          // the most the blocks hold at once: end of forward, or a recomputation in backward
  double temporary = 0;       // the largest working set of one op (attention, feed-forward)
  double weight_casts = 0;    // under autocast: its cached copies of the fp32 Linear weights
  double offloaded = 0;       // host memory: the checkpointed blocks' inputs (offload_checkpointed)
  double total() const { return blocks + outside_blocks + temporary + weight_casts; }
};

// The peak activation bytes of one forward and backward of `config` at these
// settings (no model state: parameters, gradients, optimizer). Throws
// UsageError when the latents do not divide into patches.
ActivationMemory activation_memory(const WanConfig& config, const ActivationSettings& settings);

// The attention chunk a WanModel of `config` runs these settings with
// (WanModel::attention_chunk_for): 0 for the whole score matrix. Throws
// UsageError when the latents do not divide into patches.
int64_t planned_attention_chunk(const WanConfig& config, const ActivationSettings& settings);

// The peak bytes of one forward without autograd (a distillation teacher's,
// a sampler's) at these settings (checkpointing does not apply): the
// residual stream and one block's tensors in flight, with its largest op.
double inference_memory(const WanConfig& config, const ActivationSettings& settings);

}  // namespace wt::wan
