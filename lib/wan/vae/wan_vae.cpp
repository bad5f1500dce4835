#include "wantrain/wan/vae/wan_vae.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/vae_parts.hpp"

namespace wt::wan {
namespace vae_parts {

struct Encoder : Coder {
  Encoder(const VaeConfig& c, at::ScalarType dtype) {
    add_input(3, c.dim, dtype);
    levels = std::make_unique<Sequence>(*this, "downsamples");
    const auto& mult = c.dim_mult;
    int64_t in = c.dim;
    double scale = 1.0;
    for (size_t i = 0; i < mult.size(); ++i) {
      const int64_t out = c.dim * mult[i];
      for (int64_t j = 0; j < c.num_res_blocks; ++j, in = out) {
        levels->add(std::make_shared<ResidualBlock>(in, out, slots, dtype));
        if (attention_at(c, scale)) levels->add(std::make_shared<AttentionBlock>(out, dtype));
      }
      if (i + 1 == mult.size()) break;
      levels->add(std::make_shared<Resample>(out, out, false, c.temperal_downsample[i], slots, dtype));
      scale /= 2;
    }
    add_middle(in, dtype);
    add_head(in, 2 * c.z_dim, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(conv1->forward(x, cache), cache);
    return head_conv->forward(middle->forward(y, cache), cache, head_norm.get());
  }
  static bool attention_at(const VaeConfig& c, double scale) {
    for (double s : c.attn_scales)
      if (s == scale) return true;  // powers of two: exact, as the official `in`
    return false;
  }
};

struct Decoder : Coder {
  Decoder(const VaeConfig& c, at::ScalarType dtype) {
    const auto& mult = c.dim_mult;
    const int64_t levels_n = int64_t(mult.size());
    const int64_t top = c.dim * mult.back();
    add_input(c.z_dim, top, dtype);
    add_middle(top, dtype);
    levels = std::make_unique<Sequence>(*this, "upsamples");
    double scale = std::ldexp(1.0, int(2 - levels_n));
    int64_t previous = top;
    for (int64_t i = 0; i < levels_n; ++i) {
      const int64_t out = c.dim * mult[size_t(levels_n - 1 - i)];
      // A resample halves the channels it doubles in size (levels 1 to 3).
      int64_t in = i == 0 ? previous : previous / 2;
      for (int64_t j = 0; j <= c.num_res_blocks; ++j, in = out) {
        levels->add(std::make_shared<ResidualBlock>(in, out, slots, dtype));
        if (Encoder::attention_at(c, scale)) levels->add(std::make_shared<AttentionBlock>(out, dtype));
      }
      previous = out;
      if (i + 1 == levels_n) break;
      // temperal_upsample is temperal_downsample reversed.
      levels->add(std::make_shared<Resample>(out, out / 2, true, c.temperal_downsample[size_t(levels_n - 2 - i)], slots,
                                             dtype));
      scale *= 2;
    }
    add_head(previous, 3, dtype);
  }
  at::Tensor forward(const at::Tensor& x, Cache& cache) const {
    auto y = levels->forward(middle->forward(conv1->forward(x, cache), cache), cache);
    return head_conv->forward(y, cache, head_norm.get());
  }
};

}  // namespace vae_parts

WanVaeImpl::WanVaeImpl(const VaeConfig& config, at::ScalarType dtype) : config_(config) {
  check_vae_config(config, "VAE config");
  if (dtype != at::kFloat && dtype != at::kBFloat16)
    throw UsageError(fmt::format("VAE: weights must be float32 or bfloat16, not {}", c10::toString(dtype)));
  torch::NoGradGuard no_grad;
  encoder_ = register_module("encoder", std::make_shared<vae_parts::Encoder>(config, dtype));
  conv1_ = register_module("conv1", std::make_shared<vae_parts::Conv>(
                                        std::vector<int64_t>{2 * config.z_dim, 2 * config.z_dim, 1, 1, 1}, dtype));
  conv2_ = register_module(
      "conv2", std::make_shared<vae_parts::Conv>(std::vector<int64_t>{config.z_dim, config.z_dim, 1, 1, 1}, dtype));
  decoder_ = register_module("decoder", std::make_shared<vae_parts::Decoder>(config, dtype));
}

namespace {
// What the shared encode and decode loops need of this VAE's config.
vae_parts::LatentSpace latent_space(const VaeConfig& c) {
  return {c.z_dim, c.spatial_factor(), c.temporal_factor(), c.latents_mean, c.latents_std};
}
}  // namespace

VideoVaeConfig WanVaeImpl::video_config() const {
  VideoVaeConfig c;
  c.version = VaeVersion::Wan21;
  c.wan21 = config_;
  return c;
}

at::Tensor WanVaeImpl::encode_whole(const at::Tensor& video) {
  auto cache = encoder_->new_cache();
  return vae_parts::encode_video(video, latent_space(config_), *conv1_,
                                 [&](const at::Tensor& chunk) { return encoder_->forward(chunk, cache); });
}

void WanVaeImpl::decode_whole(const at::Tensor& latents, const FrameSink& sink) {
  auto cache = decoder_->new_cache();
  vae_parts::decode_latents(
      latents, latent_space(config_), *conv2_,
      [&](const at::Tensor& frame) { return decoder_->forward(frame, cache).to(torch::kFloat); }, sink);
}

}  // namespace wt::wan
