#include "wantrain/wan/vae/vae_parts.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wantrain/util/error.hpp"

namespace wt::wan::vae_parts {

at::Tensor conv3d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::IntArrayRef stride,
                  at::IntArrayRef padding) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn())
    return at::mkldnn_convolution(x.contiguous(), weight.contiguous(), bias, padding, stride, {1, 1, 1}, 1);
  return at::conv3d(x, weight, bias, stride, padding);
}

at::Tensor upsample_conv(const at::Tensor& x, int64_t n, const Conv& conv) {
  const int64_t b = x.size(0), c = x.size(1) / n, t = x.size(2), h = x.size(3), w = x.size(4);
  const int64_t o = conv.weight.size(0);
  const auto taps = torch::tensor({1.f, 0.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, 0.f, 0.f, 1.f}, conv.weight.device())
                        .view({2, 2, 3});  // [parity, tap, kernel row]
  const auto kernels = at::einsum("pai,qbj,ocij->pqocab", {taps, taps, conv.weight.to(torch::kFloat)})
                           .reshape({4 * o, c, 1, 2, 2})
                           .to(conv.weight.scalar_type());  // [(py, px, O), C, 1, 2, 2]
  const auto y = conv3d(x.reshape({b * n, c, t, h, w}), kernels, conv.bias.repeat({4}), {1, 1, 1},
                        {0, 1, 1});  // [B n, 4 O, T, H + 1, W + 1]
  const auto parts = y.view({b, n, 2, 2, o, t, h + 1, w + 1});
  auto out = at::empty({b, o, t, n, h, 2, w, 2}, y.options());
  for (int64_t py = 0; py < 2; ++py)
    for (int64_t px = 0; px < 2; ++px)
      out.select(7, px).select(5, py).copy_(
          parts.select(3, px).select(2, py).narrow(4, py, h).narrow(5, px, w).permute({0, 2, 3, 1, 4, 5}));
  return out.view({b, o, t * n, 2 * h, 2 * w});
}

at::Tensor per_channel(const std::vector<double>& values, const at::Device& device) {
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))
      .to(device, torch::kFloat)
      .view({1, -1, 1, 1, 1});
}

std::string shape_text(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

at::Tensor encode_video(const at::Tensor& video, const LatentSpace& space, const Conv& conv1,
                        const std::function<at::Tensor(const at::Tensor& chunk)>& encode_chunk) {
  const int64_t f = space.spatial_factor;
  if (video.dim() != 5 || video.size(1) != 3 || video.size(2) < 1 || (video.size(2) - 1) % 4 != 0 ||
      video.size(3) < f || video.size(3) % f != 0 || video.size(4) < f || video.size(4) % f != 0)
    throw UsageError(
        fmt::format("VAE encode: video {} must be [B, 3, 1 + 4k, H, W] with H and W positive multiples of {}",
                    shape_text(video), f));
  torch::NoGradGuard no_grad;
  const auto& weight = conv1.weight;
  const int64_t b = video.size(0), frames = video.size(2), z = space.z_dim;
  auto latents = torch::empty({b, z, 1 + (frames - 1) / space.temporal_factor, video.size(3) / f, video.size(4) / f},
                              weight.options().dtype(torch::kFloat));  // [B, z, 1 + k, H/s, W/s], fp32
  // Only mu is kept: the first z output channels of conv1 (1x1x1, frame by frame).
  const auto mu_weight = weight.narrow(0, 0, z), mu_bias = conv1.bias.narrow(0, 0, z);
  int64_t done = 0;
  for (int64_t first = 0; first < frames; first += first == 0 ? 1 : 4) {
    const auto chunk = video.narrow(2, first, first == 0 ? 1 : 4).to(weight.device(), weight.scalar_type());
    const auto mu = conv3d(encode_chunk(chunk), mu_weight, mu_bias);
    latents.narrow(2, done, mu.size(2)).copy_(mu);
    done += mu.size(2);
  }
  // In fp32, times 1/std, as the official wrappers.
  return latents.sub_(per_channel(space.mean, weight.device()))
      .mul_(per_channel(space.std, weight.device()).reciprocal_());
}

void decode_latents(const at::Tensor& latents, const LatentSpace& space, const Conv& conv2,
                    const std::function<at::Tensor(const at::Tensor& frame)>& decode_frame,
                    const std::function<void(const at::Tensor& frames)>& sink) {
  if (latents.dim() != 5 || latents.size(1) != space.z_dim || latents.size(2) < 1 || latents.size(3) < 1 ||
      latents.size(4) < 1)
    throw UsageError(fmt::format("VAE decode: latents {} must be [B, {}, t, h, w]", shape_text(latents), space.z_dim));
  torch::NoGradGuard no_grad;
  const auto& weight = conv2.weight;
  // Back to the VAE's latent space in fp32, dividing by 1/std as the official wrappers.
  const auto z = latents.to(weight.device(), torch::kFloat)
                     .div(per_channel(space.std, weight.device()).reciprocal_())
                     .add_(per_channel(space.mean, weight.device()));
  const auto x = conv3d(z.to(weight.scalar_type()), weight, conv2.bias);          // [B, z, t, h, w]
  for (int64_t i = 0; i < x.size(2); ++i) sink(decode_frame(x.narrow(2, i, 1)));  // [B, 3, 1 or 4, H, W]
}

}  // namespace wt::wan::vae_parts
