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

using vae_parts::per_channel;

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

VideoVaeConfig WanVaeImpl::video_config() const {
  VideoVaeConfig c;
  c.version = VaeVersion::Wan21;
  c.wan21 = config_;
  return c;
}

at::Tensor WanVaeImpl::encode(const at::Tensor& video) {
  const int64_t f = config_.spatial_factor();
  if (video.dim() != 5 || video.size(1) != 3 || video.size(2) < 1 || (video.size(2) - 1) % 4 != 0 ||
      video.size(3) < f || video.size(3) % f != 0 || video.size(4) < f || video.size(4) % f != 0)
    throw UsageError(
        fmt::format("VAE encode: video {} must be [B, 3, 1 + 4k, H, W] with H and W positive multiples of {}",
                    vae_parts::shape_text(video), f));
  torch::NoGradGuard no_grad;
  const auto& weight = conv1_->weight;
  const int64_t b = video.size(0), frames = video.size(2), z = config_.z_dim;
  auto latents = torch::empty({b, z, latent_frames(frames), video.size(3) / f, video.size(4) / f},
                              weight.options().dtype(torch::kFloat));  // [B, z, 1 + k, H/8, W/8], fp32
  // Only mu is kept: the first z output channels of conv1 (1x1x1, frame by frame).
  const auto mu_weight = weight.narrow(0, 0, z), mu_bias = conv1_->bias.narrow(0, 0, z);
  auto cache = encoder_->new_cache();
  int64_t done = 0;
  for (int64_t first = 0; first < frames; first += first == 0 ? 1 : 4) {
    const auto chunk = video.narrow(2, first, first == 0 ? 1 : 4).to(weight.device(), weight.scalar_type());
    const auto mu = vae_parts::conv3d(encoder_->forward(chunk, cache), mu_weight, mu_bias);
    latents.narrow(2, done, mu.size(2)).copy_(mu);
    done += mu.size(2);
  }
  // In fp32, times 1/std, as the official wrapper.
  return latents.sub_(per_channel(config_.latents_mean, weight.device()))
      .mul_(per_channel(config_.latents_std, weight.device()).reciprocal_());
}

void WanVaeImpl::decode(const at::Tensor& latents, const FrameSink& sink) {
  if (latents.dim() != 5 || latents.size(1) != config_.z_dim || latents.size(2) < 1 || latents.size(3) < 1 ||
      latents.size(4) < 1)
    throw UsageError(
        fmt::format("VAE decode: latents {} must be [B, {}, t, h, w]", vae_parts::shape_text(latents), config_.z_dim));
  torch::NoGradGuard no_grad;
  const auto& weight = conv2_->weight;
  // Back to the VAE's latent space in fp32, dividing by 1/std as the official wrapper.
  const auto z = latents.to(weight.device(), torch::kFloat)
                     .div(per_channel(config_.latents_std, weight.device()).reciprocal_())
                     .add_(per_channel(config_.latents_mean, weight.device()));
  const auto x = vae_parts::conv3d(z.to(weight.scalar_type()), weight, conv2_->bias);  // [B, z, t, h, w]
  auto cache = decoder_->new_cache();
  for (int64_t i = 0; i < x.size(2); ++i) {
    sink(decoder_->forward(x.narrow(2, i, 1), cache).to(torch::kFloat).clamp_(-1, 1));  // [B, 3, 1 or 4, H, W]
  }
}

}  // namespace wt::wan
