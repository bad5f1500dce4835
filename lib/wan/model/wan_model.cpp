#include "wantrain/wan/model/wan_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "wantrain/distributed/sequence_exchange.hpp"
#include "wantrain/nn/attention.hpp"
#include "wantrain/nn/autocast.hpp"
#include "wantrain/nn/gelu.hpp"
#include "wantrain/wan/model/patches.hpp"
#include "wantrain/nn/recompute.hpp"
#include "wantrain/nn/rms_norm.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

torch::nn::LayerNorm layer_norm(int64_t dim, double eps, bool affine) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps).elementwise_affine(affine));
}

// t with dim 1 (tokens) padded with zeros to `tokens`, then this rank's
// contiguous part of them.
at::Tensor my_tokens(const at::Tensor& t, int64_t tokens, const distributed::Comm& group) {
  std::vector<int64_t> pad(size_t(2 * t.dim()), 0);
  pad[pad.size() - 3] = tokens - t.size(1);  // dim 1's trailing padding (the list runs from the last dim)
  const int64_t part = tokens / group.size();
  // A copy: a view would keep the whole padded tensor alive.
  return torch::constant_pad_nd(t, pad).narrow(1, group.rank() * part, part).clone();
}

// Wan's WanLayerNorm: normalise in fp32, hand back the input's dtype.
at::Tensor norm_fp32(torch::nn::LayerNorm& norm, const at::Tensor& x) {
  const auto& o = norm->options;
  // A block gathered in bf16 (ZeRO-3) holds its affine norm's weights in bf16.
  if (o.elementwise_affine() && norm->weight.scalar_type() != torch::kFloat32)
    return at::layer_norm(x.to(torch::kFloat32), o.normalized_shape(), norm->weight.to(torch::kFloat32),
                          norm->bias.to(torch::kFloat32), o.eps())
        .to(x.scalar_type());
  return norm(x.to(torch::kFloat32)).to(x.scalar_type());
}

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) { return nn::rms_norm(x, weight, eps_); }

AttentionImpl::AttentionImpl(const WanConfig& c, at::ScalarType linear_dtype, bool image_branch)
    : heads_(c.num_heads), head_dim_(c.head_dim()) {
  q = register_module("q", nn::Linear(c.dim, c.dim, linear_dtype));
  k = register_module("k", nn::Linear(c.dim, c.dim, linear_dtype));
  v = register_module("v", nn::Linear(c.dim, c.dim, linear_dtype));
  o = register_module("o", nn::Linear(c.dim, c.dim, linear_dtype));
  if (c.qk_norm) {
    norm_q = register_module("norm_q", RMSNorm(c.dim, c.eps));
    norm_k = register_module("norm_k", RMSNorm(c.dim, c.eps));
  }
  if (image_branch) {
    k_img = register_module("k_img", nn::Linear(c.dim, c.dim, linear_dtype));
    v_img = register_module("v_img", nn::Linear(c.dim, c.dim, linear_dtype));
    if (c.qk_norm) norm_k_img = register_module("norm_k_img", RMSNorm(c.dim, c.eps));
  }
}

at::Tensor AttentionImpl::attend(const at::Tensor& qs, const at::Tensor& ks, const at::Tensor& vs, bool scaled) const {
  if (chunk == nn::kFusedAttention)  // the fused kernel (nn/attention.hpp); it scales itself
    return nn::fused_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2)).transpose(1, 2);
  if (chunk > 0)  // exact, without the [B, heads, L, S] scores (nn/attention.hpp); it scales itself
    return nn::chunked_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2), chunk).transpose(1, 2);
  const auto q_scaled = scaled ? qs : qs * (1.0 / std::sqrt(double(head_dim_)));
  // [B, heads, L, S] scores, softmax over the source positions
  auto scores = torch::matmul(q_scaled.transpose(1, 2), ks.permute({0, 2, 3, 1}));
  auto weights = torch::softmax(scores.to(torch::kFloat32), -1).to(vs.scalar_type());
  return torch::matmul(weights, vs.transpose(1, 2)).transpose(1, 2);  // [B, L, heads, head_dim]
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& source, const RopeTable* rope,
                                  const at::Tensor& image_source) {
  const int64_t b = x.size(0), len = x.size(1), src_len = source.size(1);
  // Under autocast an fp32 input is rounded to the products' dtype once for
  // q, k and v, not once in each (their input gradients then sum in that dtype).
  const auto dtype = nn::autocast_dtype(x);
  auto rounded = [dtype](const at::Tensor& t) {
    return dtype != at::kFloat && t.scalar_type() == at::kFloat ? t.to(dtype) : t;
  };
  const auto input = rounded(x), from = source.is_same(x) ? input : rounded(source);
  auto qs = q(input), ks = k(from);
  if (norm_q) {
    qs = norm_q(qs);
    ks = norm_k(ks);
  }
  qs = qs.view({b, len, heads_, head_dim_});      // [B, L, heads, head_dim]
  ks = ks.view({b, src_len, heads_, head_dim_});  // [B, S, heads, head_dim]
  auto vs = v(from).view({b, src_len, heads_, head_dim_});
  // softmax(q k^T / sqrt(head_dim)), the scale folded into q (L x head_dim,
  // not the L x S scores): into its rotation in self-attention. Fused and
  // chunked attention scale by themselves.
  const double scale = 1.0 / std::sqrt(double(head_dim_));
  bool scaled = false;
  if (rope) {
    qs = apply_rope(qs, *rope, chunk != 0 ? 1.0 : scale);
    ks = apply_rope(ks, *rope);
    scaled = chunk == 0;
  } else if (chunk == 0) {
    qs = qs * scale;
    scaled = true;
  }
  if (rope && sequence_group && sequence_group->size() > 1) {
    // [B, Ls, heads, head_dim] -> every token (the padding dropped) of this
    // rank's heads, and the output back to this rank's tokens.
    auto whole = [&](const at::Tensor& t) {
      return distributed::sequence_to_heads(t.contiguous(), *sequence_group).narrow(1, 0, sequence_tokens);
    };
    auto out = attend(whole(qs), whole(ks), whole(vs), scaled);  // [B, L, heads / N, head_dim]
    out = torch::constant_pad_nd(out, {0, 0, 0, 0, 0, len * sequence_group->size() - sequence_tokens});
    return o(distributed::heads_to_sequence(out, *sequence_group).reshape({b, len, heads_ * head_dim_}));
  }
  auto out = attend(qs, ks, vs, scaled);
  if (k_img) {
    if (!image_source.defined()) throw Error("the image branch of cross-attention needs the image context");
    const int64_t img_len = image_source.size(1);
    auto ks_img = k_img(image_source);
    if (norm_k_img) ks_img = norm_k_img(ks_img);
    out = out + attend(qs, ks_img.view({b, img_len, heads_, head_dim_}),
                       v_img(image_source).view({b, img_len, heads_, head_dim_}), scaled);
  }
  return o(out.reshape({b, len, heads_ * head_dim_}));
}

WanBlockImpl::WanBlockImpl(const WanConfig& c, at::ScalarType linear_dtype) {
  modulation = register_parameter("modulation", torch::randn({1, 6, c.dim}) / std::sqrt(double(c.dim)));
  norm1 = register_module("norm1", layer_norm(c.dim, c.eps, false));
  self_attn = register_module("self_attn", Attention(c, linear_dtype));
  if (c.cross_attn_norm) norm3 = register_module("norm3", layer_norm(c.dim, c.eps, true));
  cross_attn = register_module("cross_attn", Attention(c, linear_dtype, c.image_branch()));
  norm2 = register_module("norm2", layer_norm(c.dim, c.eps, false));
  ffn = register_module("ffn", torch::nn::Sequential(nn::Linear(c.dim, c.ffn_dim, linear_dtype), nn::GeluTanh(),
                                                     nn::Linear(c.ffn_dim, c.dim, linear_dtype)));
}

at::Tensor WanBlockImpl::forward(at::Tensor x, const at::Tensor& e0, const at::Tensor& context, const RopeTable& rope,
                                 const at::Tensor& image_context) {
  // shift_sa, scale_sa, gate_sa, shift_ff, scale_ff, gate_ff: each [B, 1, dim],
  // or [B, L, dim] with per-token timesteps (e0 [B, L, 6, dim])
  std::vector<at::Tensor> m;
  {
    nn::Fp32Scope fp32;
    if (e0.dim() == 4) {
      m = (modulation.unsqueeze(0) + e0).chunk(6, 2);
      for (auto& part : m) part = part.squeeze(2);
    } else {
      m = (modulation + e0).chunk(6, 1);
    }
  }
  // norm * (1 + scale) + shift and x + y * gate: one addcmul each
  const auto attn_in = torch::addcmul(m[0], norm_fp32(norm1, x).to(torch::kFloat32), 1 + m[1]);
  auto y = self_attn(attn_in, attn_in, &rope);
  {
    nn::Fp32Scope fp32;
    x = torch::addcmul(x, y, m[2]);
  }
  auto cross_in = norm3 ? norm_fp32(norm3, x) : x;
  x = x + cross_attn(cross_in, context, nullptr, image_context);
  y = ffn->forward(torch::addcmul(m[3], norm_fp32(norm2, x).to(torch::kFloat32), 1 + m[4]));
  nn::Fp32Scope fp32;
  return torch::addcmul(x, y, m[5]);
}

VaceBlockImpl::VaceBlockImpl(const WanConfig& c, at::ScalarType linear_dtype, bool first)
    : WanBlockImpl(c, linear_dtype) {
  if (first) before_proj = register_module("before_proj", nn::Linear(c.dim, c.dim, linear_dtype));
  after_proj = register_module("after_proj", nn::Linear(c.dim, c.dim, linear_dtype));
}

WanHeadImpl::WanHeadImpl(const WanConfig& c) {
  modulation = register_parameter("modulation", torch::randn({1, 2, c.dim}) / std::sqrt(double(c.dim)));
  norm = register_module("norm", layer_norm(c.dim, c.eps, false));
  head = register_module("head", torch::nn::Linear(c.dim, c.out_dim * c.patch_volume()));
}

at::Tensor WanBlockImpl::forward_tensors(const std::vector<at::Tensor>& inputs) {
  return forward(inputs.at(0), inputs.at(1), inputs.at(2), RopeTable{inputs.at(3), inputs.at(4)},
                 inputs.size() > 5 ? inputs[5] : at::Tensor());
}

at::Tensor WanHeadImpl::forward(const at::Tensor& x, const at::Tensor& e) {
  nn::Fp32Scope fp32;
  std::vector<at::Tensor> m;  // shift, scale: [B, 1, dim], or [B, L, dim] per token (e [B, L, dim])
  if (e.dim() == 3) {
    m = (modulation.unsqueeze(0) + e.unsqueeze(2)).chunk(2, 2);
    for (auto& part : m) part = part.squeeze(2);
  } else {
    m = (modulation + e.unsqueeze(1)).chunk(2, 1);
  }
  return head(torch::addcmul(m[0], norm(x.to(torch::kFloat32)), 1 + m[1]));
}

ImageEmbeddingImpl::ImageEmbeddingImpl(const WanConfig& c) {
  if (c.model_type == ModelType::FLF2V)
    emb_pos = register_parameter("emb_pos", torch::zeros({1, 2 * c.image_tokens, c.image_dim}));
  proj = register_module(
      "proj",
      torch::nn::Sequential(torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.image_dim}).eps(1e-5)),
                            nn::Linear(c.image_dim, c.image_dim), torch::nn::GELU(), nn::Linear(c.image_dim, c.dim),
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim}).eps(1e-5))));
}

at::Tensor ImageEmbeddingImpl::forward(const at::Tensor& clip_features) {
  auto x = clip_features.to(torch::kFloat32);
  if (emb_pos.defined()) x = x + emb_pos;
  auto norm = [&](size_t i, const at::Tensor& in) {
    return proj[i]->as<torch::nn::LayerNorm>()->forward(in.to(torch::kFloat32));
  };
  x = norm(0, x);
  x = torch::gelu(proj[1]->as<nn::Linear>()->forward(x));
  return norm(4, proj[3]->as<nn::Linear>()->forward(x));
}

WanModelImpl::WanModelImpl(WanConfig c, at::ScalarType block_linear_dtype, WanInit init) : config_(std::move(c)) {
  std::optional<nn::SkipWeightInit> skip;
  if (init == WanInit::Empty) skip.emplace();
  if (block_linear_dtype != at::kFloat && block_linear_dtype != at::kBFloat16 &&
      block_linear_dtype != at::kFloat8_e4m3fn)
    throw Error("WanModel: block Linears are held in fp32, bf16 or fp8");
  const auto& cfg = config_;
  validate(cfg, "(in code)");
  auto patch = torch::IntArrayRef(cfg.patch_size.data(), 3);
  patch_embedding = register_module(
      "patch_embedding", torch::nn::Conv3d(torch::nn::Conv3dOptions(cfg.in_dim, cfg.dim, patch).stride(patch)));
  text_embedding =
      register_module("text_embedding", torch::nn::Sequential(torch::nn::Linear(cfg.text_dim, cfg.dim), nn::GeluTanh(),
                                                              torch::nn::Linear(cfg.dim, cfg.dim)));
  time_embedding =
      register_module("time_embedding", torch::nn::Sequential(torch::nn::Linear(cfg.freq_dim, cfg.dim),
                                                              torch::nn::SiLU(), torch::nn::Linear(cfg.dim, cfg.dim)));
  time_projection = register_module("time_projection",
                                    torch::nn::Sequential(torch::nn::SiLU(), torch::nn::Linear(cfg.dim, 6 * cfg.dim)));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i) blocks->push_back(WanBlock(cfg, block_linear_dtype));
  head = register_module("head", WanHead(cfg));
  if (cfg.image_branch()) img_emb = register_module("img_emb", ImageEmbedding(cfg));
  if (cfg.ref_conv) {
    const std::vector<int64_t> patch_hw{cfg.patch_size[1], cfg.patch_size[2]};
    ref_conv = register_module(
        "ref_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(cfg.out_dim, cfg.dim, patch_hw).stride(patch_hw)));
  }
  if (cfg.vace()) {
    vace_blocks = register_module("vace_blocks", torch::nn::ModuleList());
    for (size_t n = 0; n < cfg.vace_layers.size(); ++n)
      vace_blocks->push_back(VaceBlock(cfg, block_linear_dtype, n == 0));
    vace_patch_embedding =
        register_module("vace_patch_embedding",
                        torch::nn::Conv3d(torch::nn::Conv3dOptions(cfg.vace_in_dim, cfg.dim, patch).stride(patch)));
  }
  if (init == WanInit::Random) init_weights();
}

void WanModelImpl::init_weights() {
  torch::NoGradGuard no_grad;
  // Both kinds of Linear in one pass, in registration order: the generator's
  // draws are those of a model built from torch::nn::Linear alone.
  for (auto& module : modules(/*include_self=*/false))
    if (auto* linear = module->as<torch::nn::Linear>()) {
      torch::nn::init::xavier_uniform_(linear->weight);
      torch::nn::init::zeros_(linear->bias);
    } else if (auto* block_linear = module->as<nn::Linear>()) {
      // xavier_uniform_'s bound, drawn in fp32 whatever the layer's dtype.
      const auto& w = block_linear->weight;
      const double bound = std::sqrt(3.0) * std::sqrt(2.0 / double(w.size(0) + w.size(1)));
      block_linear->fill_weight_uniform(-bound, bound);
      torch::nn::init::zeros_(block_linear->bias);
    }
  // xavier over the flattened kernel [dim, in_dim * prod(patch)], as Wan does
  torch::nn::init::xavier_uniform_(patch_embedding->weight.view({config_.dim, -1}));
  for (auto* seq : {&text_embedding, &time_embedding})
    for (auto& module : (*seq)->modules(false))
      if (auto* linear = module->as<torch::nn::Linear>()) torch::nn::init::normal_(linear->weight, 0.0, 0.02);
  torch::nn::init::zeros_(head->head->weight);
  // VaceWanModel's: the VACE branch starts adding nothing (a base model's
  // weights with a fresh branch sample as the base model).
  if (vace_blocks)
    for (const auto& block : *vace_blocks) {
      auto& vace = *block->as<VaceBlockImpl>();
      for (auto* proj : {vace.before_proj ? vace.before_proj.get() : nullptr, vace.after_proj.get()})
        if (proj) {
          proj->fill_weight_uniform(0, 0);
          torch::nn::init::zeros_(proj->bias);
        }
    }
}

std::vector<WanBlockImpl*> WanModelImpl::all_blocks() const {
  std::vector<WanBlockImpl*> all;
  for (const auto& block : *blocks) all.push_back(block->as<WanBlockImpl>());
  if (vace_blocks)
    for (const auto& block : *vace_blocks) all.push_back(block->as<WanBlockImpl>());
  return all;
}

void WanModelImpl::set_activation_offload(bool on) {
  offload_ = on ? std::make_unique<nn::ActivationOffload>() : nullptr;
}

void WanModelImpl::set_attention_chunk(int64_t queries, int64_t score_budget) {
  if (queries < nn::kFusedAttention)
    throw Error(
        fmt::format("WanModel: attention chunk {}: expected fused (nn::kFusedAttention), 0 (the whole score "
                    "matrix), a number of queries or auto (nn::kAutoAttentionChunk)",
                    queries));
  if (score_budget < 1) throw Error(fmt::format("WanModel: attention score budget {}: must be positive", score_budget));
  attention_chunk_ = queries;
  attention_score_budget_ = score_budget;
  if (queries != nn::kAutoAttentionChunk) set_block_attention_chunk(queries);
}

void WanModelImpl::set_sequence_parallel(distributed::Comm* group) {
  if (group && config_.num_heads % group->size() != 0)
    throw Error(fmt::format("WanModel: {} heads do not split over a sequence-parallel group of {}", config_.num_heads,
                            group->size()));
  sequence_group_ = group && group->size() > 1 ? group : nullptr;
  for (auto* block : all_blocks()) block->self_attn->sequence_group = sequence_group_;
}

int64_t WanModelImpl::attention_chunk_for(int64_t batch, int64_t tokens) const {
  // With sequence parallelism a rank attends with its share of the heads over every token.
  const int64_t heads = config_.num_heads / (sequence_group_ ? sequence_group_->size() : 1);
  return nn::resolve_attention_chunk(attention_chunk_, batch, heads, tokens, tokens, nn::kAttentionScoreBytes,
                                     attention_score_budget_);
}

void WanModelImpl::set_block_attention_chunk(int64_t queries) {
  for (auto* block : all_blocks()) block->self_attn->chunk = block->cross_attn->chunk = queries;
}

const RopeTable& WanModelImpl::rope_for(std::array<int64_t, 3> grid, at::Device device) {
  if (!rope_.cos.defined() || grid != rope_grid_ || rope_.cos.device() != device) {
    rope_ = rope_table(grid, config_.head_dim(), device);
    rope_grid_ = grid;
  }
  return rope_;
}

at::Tensor WanModelImpl::forward(const at::Tensor& noisy, const at::Tensor& t, const at::Tensor& context,
                                 const ModelCondition& image, BlockStackCache* cache) {
  const auto& cfg = config_;
  const int64_t latent_channels = cfg.in_dim - cfg.condition_channels();
  if (noisy.dim() != 5 || noisy.size(1) != latent_channels)
    throw UsageError(fmt::format("model input must be latents [B, {}, F, H, W], got [{}]", latent_channels,
                                 fmt::join(noisy.sizes(), ",")));
  if (context.dim() != 3 || context.size(2) != cfg.text_dim || context.size(1) > cfg.text_len)
    throw UsageError(fmt::format("model context must be [B, <= {}, {}], got [{}]", cfg.text_len, cfg.text_dim,
                                 fmt::join(context.sizes(), ",")));
  at::Tensor x = noisy;
  if (cfg.image_conditioned()) {
    const auto& y = image.y;
    if (!y.defined())
      throw UsageError(fmt::format("this {} model needs the image condition y", model_type_name(cfg.model_type)));
    if (y.dim() != 5 || y.size(0) != x.size(0) || y.size(1) != cfg.condition_channels() ||
        y.sizes().slice(2) != x.sizes().slice(2))
      throw UsageError(fmt::format("model condition y must be [{},{},{},{},{}] (the latents' batch, F, H, W), got [{}]",
                                   x.size(0), cfg.condition_channels(), x.size(2), x.size(3), x.size(4),
                                   fmt::join(y.sizes(), ",")));
    x = torch::cat({x, y.to(x.scalar_type())}, 1);
  } else if (image.y.defined() || image.clip_fea.defined()) {
    throw UsageError(fmt::format("a {} model takes no image condition", model_type_name(cfg.model_type)));
  }
  if (cfg.vace()) {
    const auto& v = image.vace_context;
    if (!v.defined()) throw UsageError("this vace model needs its VACE context");
    if (v.dim() != 5 || v.size(0) != x.size(0) || v.size(1) != cfg.vace_in_dim ||
        v.sizes().slice(2) != x.sizes().slice(2))
      throw UsageError(
          fmt::format("model VACE context must be [{},{},{},{},{}] (the latents' batch, F, H, W), got [{}]", x.size(0),
                      cfg.vace_in_dim, x.size(2), x.size(3), x.size(4), fmt::join(v.sizes(), ",")));
  } else if (image.vace_context.defined()) {
    throw UsageError(
        fmt::format("a {} model has no VACE blocks: it takes no VACE context", model_type_name(cfg.model_type)));
  }
  if (cfg.ref_conv && image.full_ref.defined()) {
    const auto& r = image.full_ref;
    if (r.dim() != 4 || r.size(0) != x.size(0) || r.size(1) != cfg.out_dim || r.sizes().slice(2) != x.sizes().slice(3))
      throw UsageError(
          fmt::format("model reference latents full_ref must be [{},{},{},{}] (the latents' batch, H, W), "
                      "got [{}]",
                      x.size(0), cfg.out_dim, x.size(3), x.size(4), fmt::join(r.sizes(), ",")));
  } else if (image.full_ref.defined()) {
    throw UsageError("this model has no ref_conv (add_ref_conv): it takes no reference latents full_ref");
  }
  if (units_) units_->begin_forward();
  nn::ActivationOffload* offload = recompute_every_ > 0 && torch::GradMode::is_enabled() ? offload_.get() : nullptr;
  if (offload) offload->begin_forward();
  at::Tensor image_context;
  if (cfg.image_branch()) {
    const auto& f = image.clip_fea;
    const int64_t tokens = cfg.condition_images() * cfg.image_tokens;
    if (!f.defined())
      throw UsageError(fmt::format("this {} model needs the CLIP features of its picture{}",
                                   model_type_name(cfg.model_type), cfg.condition_images() > 1 ? "s" : ""));
    if (f.dim() != 3 || f.size(0) != x.size(0) || f.size(1) != tokens || f.size(2) != cfg.image_dim)
      throw UsageError(fmt::format("model CLIP features must be [{},{},{}], got [{}]", x.size(0), tokens, cfg.image_dim,
                                   fmt::join(f.sizes(), ",")));
    image_context = img_emb(f);  // [B, tokens, dim]
  } else if (image.clip_fea.defined()) {
    throw UsageError("this model has no CLIP branch (image_dim 0): it takes no CLIP features");
  }
  const auto video_grid = token_grid(x.sizes(), cfg.patch_size);
  const int64_t batch = x.size(0), video_tokens = video_grid[0] * video_grid[1] * video_grid[2];
  const bool per_token = t.dim() == 2;
  if (!(t.dim() == 1 && t.size(0) == batch) && !(per_token && t.size(0) == batch && t.size(1) == video_tokens))
    throw UsageError(fmt::format("model timesteps must be [{}] or [{}, {}] (one per token), got [{}]", batch, batch,
                                 video_tokens, fmt::join(t.sizes(), ",")));

  auto tokens = patch_embedding(x).flatten(2).transpose(1, 2);  // [B, L, dim]
  // Fun-Control V1.1: the reference picture's tokens first, one frame more on the grid.
  auto grid = video_grid;
  at::Tensor times = t;
  const int64_t ref_tokens = cfg.ref_conv ? video_grid[1] * video_grid[2] : 0;
  if (cfg.ref_conv) {
    const auto ref = image.full_ref.defined() ? image.full_ref.to(x.scalar_type())
                                              : torch::zeros({batch, cfg.out_dim, x.size(3), x.size(4)}, x.options());
    tokens = torch::cat({ref_conv(ref).flatten(2).transpose(1, 2), tokens}, 1);
    grid[0] += 1;
    if (per_token) times = torch::cat({t.narrow(1, video_tokens - 1, 1).expand({batch, ref_tokens}), t}, 1);
  }
  const int64_t token_count = video_tokens + ref_tokens;

  // Per-token timesteps (Wan2.2's TI2V: 0 on the kept first frame) give every
  // token its own time embedding and modulation: e [B, L, dim], e0 [B, L, 6, dim].
  at::Tensor e, e0;
  {
    nn::Fp32Scope fp32;
    e = time_embedding->forward(sinusoidal_embedding(times.flatten(), cfg.freq_dim).to(x.device()));  // [B(L), dim]
    e0 = time_projection->forward(e).unflatten(1, {6, cfg.dim});                                      // [B(L), 6, dim]
    if (per_token) {
      e = e.unflatten(0, {batch, token_count});
      e0 = e0.unflatten(0, {batch, token_count});
    }
  }

  auto padded = torch::constant_pad_nd(context, {0, 0, 0, cfg.text_len - context.size(1)});  // [B, text_len, text_dim]
  auto ctx = text_embedding->forward(padded);                                                // [B, text_len, dim]

  // Auto: this batch's chunk, which a checkpointed block's recomputation in
  // backward finds still set (a step's forward and backward see one shape).
  if (attention_chunk_ == nn::kAutoAttentionChunk) set_block_attention_chunk(attention_chunk_for(batch, token_count));
  RopeTable rope = rope_for(grid, x.device());
  int64_t padded_tokens = token_count;
  if (sequence_group_) {
    // This rank's tokens of the sequence padded to a multiple of the group,
    // with their RoPE angles and per-token modulation.
    const auto& group = *sequence_group_;
    padded_tokens = (token_count + group.size() - 1) / group.size() * group.size();
    tokens = my_tokens(tokens, padded_tokens, group);
    if (per_token) {
      e = my_tokens(e, padded_tokens, group);
      e0 = my_tokens(e0, padded_tokens, group);
    }
    rope = {my_tokens(rope.cos.unsqueeze(0), padded_tokens, group).squeeze(0),
            my_tokens(rope.sin.unsqueeze(0), padded_tokens, group).squeeze(0)};
    for (auto* block : all_blocks()) block->self_attn->sequence_tokens = token_count;
  }
  int64_t valid_tokens = token_count;
  if (sequence_group_) {
    const int64_t part = tokens.size(1);
    valid_tokens = std::clamp<int64_t>(token_count - sequence_group_->rank() * part, 0, part);
  }
  const BlockStack stack{tokens, e, e0, valid_tokens, sequence_group_};
  const at::Tensor skipped = cache ? cache->skip(stack) : at::Tensor();
  // VACE: the context's tokens c go through the VACE blocks one by one, each
  // just before its hint is added (the official model runs them all first
  // and holds every hint: the same values).
  at::Tensor vace_c = cfg.vace() && !skipped.defined() ? vace_tokens(image, x, padded_tokens) : at::Tensor();
  const at::Tensor first_tokens = tokens;
  size_t next_vace = 0;
  for (size_t i = 0; i < blocks->size() && !skipped.defined(); ++i) {
    auto& block = *blocks[i]->as<WanBlockImpl>();
    if (units_) units_->before_block(int64_t(i));
    if (recompute_every_ > 0 && int64_t(i) % recompute_every_ == 0) {
      std::vector<at::Tensor> inputs{tokens, e0, ctx, rope.cos, rope.sin};
      if (image_context.defined()) inputs.push_back(image_context);
      tokens = nn::recomputed(block, inputs, offload);
    } else {
      tokens = block.forward(tokens, e0, ctx, rope, image_context);
    }
    // The VACE block that follows block i runs inside block i's window:
    // ZeRO-3 gathers it with the block (wan::zero_unit).
    if (next_vace < cfg.vace_layers.size() && cfg.vace_layers[next_vace] == int64_t(i)) {
      const int64_t n = int64_t(next_vace++);
      auto& vace = *vace_blocks[n]->as<VaceBlockImpl>();
      // Swapped VACE blocks are whole from here to their hint (BlockSwap's side blocks).
      if (units_) vace_c = units_->before_side(n, vace_c);
      if (n == 0) vace_c = vace.before_proj(vace_c) + first_tokens;
      if (recompute_every_ > 0 && n % recompute_every_ == 0)
        vace_c = nn::recomputed(vace, {vace_c, e0, ctx, rope.cos, rope.sin}, offload);
      else
        vace_c = vace.forward(vace_c, e0, ctx, rope);
      auto hint = vace.after_proj(vace_c) * image.vace_scale;
      if (units_) hint = units_->after_side(n, hint);
      tokens = tokens + hint;
    }
    if (units_) tokens = units_->after_block(int64_t(i), tokens);
  }
  if (skipped.defined())
    tokens = skipped;
  else if (cache)
    cache->ran(stack, tokens);

  auto out = head(tokens, e);  // [B, L, prod(patch) * out_dim]
  if (units_) units_->end_forward();
  if (sequence_group_) out = distributed::gather_sequence(out, *sequence_group_).narrow(1, 0, token_count);
  if (ref_tokens > 0) out = out.narrow(1, ref_tokens, video_tokens);
  return unpatchify(out, video_grid, cfg.patch_size, cfg.out_dim);
}

at::Tensor WanModelImpl::vace_tokens(const ModelCondition& condition, const at::Tensor& x, int64_t padded_tokens) {
  auto c = vace_patch_embedding(condition.vace_context.to(x.scalar_type())).flatten(2).transpose(1, 2);
  return sequence_group_ ? my_tokens(c, padded_tokens, *sequence_group_) : c;
}

}  // namespace wt::wan
