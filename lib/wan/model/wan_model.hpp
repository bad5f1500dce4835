// WanModel: a LibTorch port of the Wan2.1/2.2 diffusion transformer with the
// official parameter names and shapes (model_config.hpp lists them), so real
// Wan weights load by name. Forward as the official WanModel, text-to-video:
//
//   x [B, C, F, H, W] --patch_embedding--> tokens [B, L, dim], (f, h, w) order
//   t [B] --sinusoidal--time_embedding--> e [B, dim] --time_projection--> e0 [B, 6, dim]
//     (or t [B, L], one per token as Wan2.2's TI2V gives: e [B, L, dim], e0 [B, L, 6, dim])
//   context [B, Lc <= text_len, text_dim], zero-padded to text_len --text_embedding-->
//   blocks: modulated self-attention with 3D RoPE, cross-attention, gated FFN
//   head (modulated by e) --unpatchify--> [B, out_dim, F, H, W]
//
// Norms, modulation, the time embedding, RoPE and the head run in fp32 even
// inside an AutocastScope; the attention and FFN matrix products follow it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/nn/linear.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/nn/recompute.hpp"
#include "wantrain/wan/model/block_stack_cache.hpp"
#include "wantrain/wan/model/model_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/positional.hpp"

namespace wt::wan {

// y = x * rsqrt(mean(x^2) + eps) * weight over the last dim, in fp32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [dim]

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Multi-head attention with Wan's names: q, k, v, o (with bias), optional
// RMSNorm norm_q / norm_k over the full dim. Self-attention passes a RoPE
// table; cross-attention passes none and attends over every context position.
// With `image_branch` (the cross-attention of Wan2.1's I2V and FLF2V), also
// k_img, v_img and norm_k_img: the same queries attend over the image
// context too, and the two results are summed before o.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const WanConfig& config, at::ScalarType linear_dtype = at::kFloat, bool image_branch = false);
  // x [B, L, dim], source [B, S, dim], image_source [B, Si, dim] (the image
  // branch only) -> [B, L, dim]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& source, const RopeTable* rope,
                     const at::Tensor& image_source = {});

  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};  // nn::Linear: LoRA targets
  RMSNorm norm_q{nullptr}, norm_k{nullptr};
  nn::Linear k_img{nullptr}, v_img{nullptr};
  RMSNorm norm_k_img{nullptr};
  // nn::kFusedAttention: fused_attention; > 0: chunked_attention over this
  // many queries at a time; 0: the whole score matrix.
  int64_t chunk = nn::kFusedAttention;
  // Sequence parallelism (self-attention only; WanModel sets both): x holds
  // this rank's tokens of a sequence of `sequence_tokens`, split over the
  // group's ranks; q, k and v are exchanged for every token of this rank's
  // heads, attention runs without the padding, and the output goes back.
  distributed::Comm* sequence_group = nullptr;
  int64_t sequence_tokens = 0;

 private:
  // softmax(qs ks^T / sqrt(head_dim)) vs over heads: qs [B, L, heads,
  // head_dim] (already scaled when `scaled`), ks and vs [B, S, heads, head_dim].
  at::Tensor attend(const at::Tensor& qs, const at::Tensor& ks, const at::Tensor& vs, bool scaled) const;

  int64_t heads_, head_dim_;
};
TORCH_MODULE(Attention);

class WanBlockImpl : public nn::Recomputable {
 public:
  explicit WanBlockImpl(const WanConfig& config, at::ScalarType linear_dtype = at::kFloat);
  // x [B, L, dim], e0 [B, 6, dim] or per token [B, L, 6, dim] fp32, context [B, text_len, dim],
  // image_context [B, Li, dim] (models with the image branch only)
  at::Tensor forward(at::Tensor x, const at::Tensor& e0, const at::Tensor& context, const RopeTable& rope,
                     const at::Tensor& image_context = {});
  // forward(x, e0, context, {rope cos, rope sin}[, image_context]): for activation checkpointing.
  at::Tensor forward_tensors(const std::vector<at::Tensor>& inputs) override;

  at::Tensor modulation;  // [1, 6, dim]
  torch::nn::LayerNorm norm1{nullptr}, norm3{nullptr}, norm2{nullptr};
  Attention self_attn{nullptr}, cross_attn{nullptr};
  torch::nn::Sequential ffn{nullptr};  // nn::Linear, GELU (tanh), nn::Linear
};
TORCH_MODULE(WanBlock);

// A VACE block (the official VaceWanAttentionBlock): a Wan block over the
// VACE context's tokens c, the first with before_proj (its input is
// before_proj(c) + x, x the latents' tokens as patch-embedded), each with
// after_proj, whose output is the hint added after its base block.
class VaceBlockImpl : public WanBlockImpl {
 public:
  VaceBlockImpl(const WanConfig& config, at::ScalarType linear_dtype, bool first);

  nn::Linear before_proj{nullptr}, after_proj{nullptr};  // before_proj: the first block only
};
TORCH_MODULE(VaceBlock);

class WanHeadImpl : public torch::nn::Module {
 public:
  explicit WanHeadImpl(const WanConfig& config);
  // x [B, L, dim], e [B, dim] or per token [B, L, dim] fp32 -> [B, L, prod(patch) * out_dim]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& e);

  at::Tensor modulation;  // [1, 2, dim]
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(WanHead);

// Wan2.1's MLPProj: CLIP features [B, N, image_dim] -> image context [B, N,
// dim] through proj = LayerNorm, Linear, GELU (exact), Linear, LayerNorm
// (LayerNorms affine, eps 1e-5, in fp32); FLF2V adds emb_pos [1, 2 *
// image_tokens, image_dim] first, telling the first picture's tokens from
// the last's.
class ImageEmbeddingImpl : public torch::nn::Module {
 public:
  explicit ImageEmbeddingImpl(const WanConfig& config);
  at::Tensor forward(const at::Tensor& clip_features);

  at::Tensor emb_pos;  // FLF2V only
  torch::nn::Sequential proj{nullptr};
};
TORCH_MODULE(ImageEmbedding);

enum class WanInit { Random, Empty };

class WanModelImpl : public torch::nn::Module {
 public:
  // Parameters are initialised as Wan's init_weights does, from LibTorch's
  // global generator (torch::manual_seed). `block_linear_dtype` kBFloat16
  // holds the blocks' Linear weights and biases (nearly all parameters) in
  // bf16 from the start, one layer at a time in fp32 while it is drawn: a
  // frozen LoRA base that never exists in fp32; kFloat8_e4m3fn holds the
  // weights in fp8 with their scales (nn/fp8_weights.hpp) and the biases in
  // bf16. The draws, and so the values before rounding, are those of the
  // fp32 model.
  // WanInit::Empty allocates the parameters without drawing them (the
  // blocks' Linears, nearly all of them, are not even written), for a model
  // whose weights are loaded next: a teacher.
  explicit WanModelImpl(WanConfig config, at::ScalarType block_linear_dtype = at::kFloat,
                        WanInit init = WanInit::Random);

  // x [B, in_dim - condition_channels, F, H, W] noisy latents (F, H, W
  // multiples of patch_size), t [B] timesteps in [0, 1000] or [B, L] one per
  // token (L = the token count, in (f, h, w) order), context [B, Lc,
  // text_dim] with Lc <= text_len, and for an i2v or flf2v model its image
  // condition, for a vace model its VACE context and scale -> [B, out_dim,
  // F, H, W]. A ref_conv model's reference tokens (full_ref, zeros when
  // undefined, as VideoX-Fun's pipeline gives them) come first: RoPE's frame
  // 0, the video's frames 1..F, a per-token t's last value repeated for
  // them; they are cut off before unpatchify. UsageError naming the input whose shape is wrong, or a
  // condition the model lacks or does not take.
  // `cache`, when given, may skip the block stack (block_stack_cache.hpp).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                     const ModelCondition& image = {}, BlockStackCache* cache = nullptr);

  const WanConfig& config() const { return config_; }
  // Every block of the model, in the order of `blocks` then `vace_blocks`.
  std::vector<WanBlockImpl*> all_blocks() const;

  // Activation checkpointing (nn/recompute.hpp): with every = N > 0,
  // blocks 0, N, 2N, ... keep no activations and are run again in backward
  // (N = 1: every block); 0: off. Gradients are those without it.
  void set_grad_checkpoint(int64_t every) { recompute_every_ = every; }
  int64_t grad_checkpoint() const { return recompute_every_; }
  // With checkpointing: each checkpointed block's input waits in host
  // memory until backward brings it back, one block ahead
  // (nn/activation_offload.hpp). Gradients are those without it.
  void set_activation_offload(bool on);
  bool activation_offload() const { return offload_ != nullptr; }

  // Self- and cross-attention through the fused kernel
  // (nn::kFusedAttention, the default), or over `queries` query rows at a
  // time, with a backward that recomputes each chunk (nn/attention.hpp):
  // attention memory linear in the token count either way. 0: the whole
  // score matrix at once.
  // nn::kAutoAttentionChunk: each forward resolves it from its batch and
  // token count (buckets differ) against `score_budget` bytes of
  // self-attention scores (nn/attention_chunk.hpp); cross-attention takes
  // the same chunk, its [L, text_len] scores being no more than
  // self-attention's once L >= text_len and small below. Error for any
  // other value.
  void set_attention_chunk(int64_t queries, int64_t score_budget = nn::kAttentionScoreBudget);
  int64_t attention_chunk() const { return attention_chunk_; }  // as set: may be nn::kAutoAttentionChunk

  // Ulysses sequence parallelism over `group` (nullptr, or a group of one:
  // off). Every rank of the group calls forward with the same inputs; each
  // runs the blocks on its contiguous 1/N of the tokens (padded to a
  // multiple of N), self-attention exchanging tokens for heads
  // (distributed/sequence_exchange.hpp) and cross-attention local, and the
  // head's output is gathered, so each rank gets the whole output. A
  // parameter's gradient on a rank is its tokens' part: the sum over the
  // group is the gradient. Error unless num_heads divides by the group's size.
  void set_sequence_parallel(distributed::Comm* group);
  distributed::Comm* sequence_parallel() const { return sequence_group_; }
  // ZeRO-3 (nn/parameter_units.hpp): each forward has the root and each
  // block gathered around its use by `units` (nullptr: the parameters are
  // whole); a VACE block runs inside the window of the block it follows
  // (its unit: zero_unit), and block swap's VACE blocks are its side units.
  // It must outlive the model's forwards and backwards.
  void set_parameter_units(nn::ParameterUnits* units) { units_ = units; }
  nn::ParameterUnits* parameter_units() const { return units_; }
  // The chunk a forward of `batch` samples of `tokens` tokens runs with (0: the whole matrix).
  int64_t attention_chunk_for(int64_t batch, int64_t tokens) const;

  torch::nn::Conv3d patch_embedding{nullptr};
  torch::nn::Sequential text_embedding{nullptr}, time_embedding{nullptr}, time_projection{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  WanHead head{nullptr};
  ImageEmbedding img_emb{nullptr};      // Wan2.1 I2V and FLF2V only
  torch::nn::Conv2d ref_conv{nullptr};  // Fun-Control V1.1 only (config().ref_conv)
  // VACE only: one VaceBlock per entry of vace_layers, and the context's patch embedding.
  torch::nn::ModuleList vace_blocks{nullptr};
  torch::nn::Conv3d vace_patch_embedding{nullptr};

 private:
  void init_weights();
  // RoPE's table for the last token grid: built once, not per step or per block.
  const RopeTable& rope_for(std::array<int64_t, 3> grid, at::Device device);
  // Every block's self- and cross-attention chunk (AttentionImpl::chunk).
  void set_block_attention_chunk(int64_t queries);
  // The VACE context's tokens [B, L(, this rank's part), dim]; UsageError for a missing or misshapen context.
  at::Tensor vace_tokens(const ModelCondition& condition, const at::Tensor& x, int64_t padded_tokens);

  WanConfig config_;
  std::array<int64_t, 3> rope_grid_{};
  RopeTable rope_;
  std::unique_ptr<nn::ActivationOffload> offload_;
  int64_t recompute_every_ = 0, attention_chunk_ = nn::kFusedAttention,
          attention_score_budget_ = nn::kAttentionScoreBudget;
  distributed::Comm* sequence_group_ = nullptr;
  nn::ParameterUnits* units_ = nullptr;
};

// Runs a WanModel on whole sequences while it lives (a forward on one rank
// alone, as the training sample's), restoring its sequence parallelism after.
class WholeSequences {
 public:
  explicit WholeSequences(WanModelImpl& model) : model_(model), group_(model.sequence_parallel()) {
    model_.set_sequence_parallel(nullptr);
  }
  ~WholeSequences() { model_.set_sequence_parallel(group_); }
  WholeSequences(const WholeSequences&) = delete;
  WholeSequences& operator=(const WholeSequences&) = delete;

 private:
  WanModelImpl& model_;
  distributed::Comm* group_;
};
TORCH_MODULE(WanModel);

}  // namespace wt::wan
