// The video VAE of Wan2.2 (the official wan/modules/vae2_2.py WanVAE_, with
// the latent normalisation and clamping of its Wan2_2_VAE wrapper: the VAE
// of TI2V-5B), in LibTorch, under the official parameter names, so that the
// released Wan2.2_VAE.pth loads by name (commit bf69229 of
// Wan-Video/Wan2.2 read):
//
//   encoder.conv1.{weight,bias}                        [dim, 12, 3, 3, 3]   causal conv of 2x2 patches
//   encoder.downsamples.I.downsamples.J                level I: num_res_blocks residual blocks, then, but
//                                                      for the last level, a resample (J = num_res_blocks)
//   encoder.middle.0, .2 (residual), .1 (attention)
//   encoder.head.0.gamma [c, 1, 1, 1], encoder.head.2.{weight,bias} [2 z_dim, c, 3, 3, 3]
//   conv1.{weight,bias}  [2 z_dim, 2 z_dim, 1, 1, 1]   -> mu (first z_dim channels) and log-variance
//   conv2.{weight,bias}  [z_dim, z_dim, 1, 1, 1]
//   decoder.conv1 [C, z_dim, 3, 3, 3] (C = dec_dim * dim_mult.back()), decoder.middle.{0,1,2},
//   decoder.upsamples.I.upsamples.J                    level I: num_res_blocks + 1 residual blocks, then,
//                                                      but for the last level, a resample
//   decoder.head.0.gamma, decoder.head.2 [12, dec_dim, 3, 3, 3]
//
// Encoder level I goes from dim * dim_mult[I - 1] (dim for I = 0) to
// dim * dim_mult[I] channels; decoder level I from dec_dim * dim_mult[n - I]
// (dim_mult[n - 1] for I = 0) to dec_dim * dim_mult[n - 1 - I]. Residual and
// attention blocks are Wan2.1's (wan_vae.hpp), and so are the resamples but
// for an up resample's 3x3 conv, which keeps its channels: [c, c, 3, 3].
// Wan2.2 has no attention in its levels.
//
// Semantics, beyond Wan2.1's (causal convs keeping two frames between
// chunks, halving and doubling time, RMS-style norms, one-head attention
// per frame):
//   - Video goes in as 2x2 patches: pixel (2i + q, 2j + r) of colour c is
//     channel 4c + 2r + q at (i, j); decode makes 12 channels and puts them
//     back the same way.
//   - Each encoder level adds to its output a shortcut of its input with no
//     weights: the input (time first padded at the front with zero frames to
//     a multiple of the level's time factor ft) split into ft x 2 x 2 blocks
//     (1 x 1 x 1 on the last level), whose in x block values, in the order
//     (channel, t, y, x), are averaged in consecutive groups into the
//     out channels. The shortcut sees only its own chunk: it keeps no cache.
//   - Each decoder level but the last adds the reverse: every input channel
//     repeated out x block / in times, in the order (channel, t, y, x), spread
//     over a block of ft x 2 x 2; on the video's first frame the first ft - 1
//     frames of that are dropped (its main path passes one frame).
// Encoding takes the first frame alone, then chunks of 4 frames; decoding
// one latent frame at a time, as officially. Latents are (mu - mean) / std
// per channel in fp32; decoded video is clamped to [-1, 1].
//
// Where it knowingly differs, in the order of sums only: as wan_vae.hpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>

#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

namespace vae_parts {
struct Encoder22;
struct Decoder22;
struct Conv;
}  // namespace vae_parts

class Wan22VaeImpl : public VideoVae {
 public:
  // Parameters in `dtype` (fp32 or bf16), frozen, drawn as PyTorch draws a
  // fresh module's. UsageError for a config check_vae22_config refuses.
  explicit Wan22VaeImpl(const Vae22Config& config, at::ScalarType dtype = at::kFloat);

  // video [B, 3, 1 + 4k, H, W] in [-1, 1], H and W multiples of 16 (of
  // config().spatial_factor()) -> normalised latents [B, z_dim, 1 + k,
  // H/16, W/16], fp32.
  at::Tensor encode_whole(const at::Tensor& video) override;

  // latents [B, z_dim, t, h, w] (normalised) -> video [B, 3, 1 + 4 (t - 1),
  // 16h, 16w], fp32, not clamped (VideoVae::decode clamps), to `sink` chunk
  // by chunk (the first frame, then 4 per latent frame).
  void decode_whole(const at::Tensor& latents, const FrameSink& sink) override;

  const Vae22Config& config() const { return config_; }
  VideoVaeConfig video_config() const override;
  VaeVersion version() const override { return VaeVersion::Wan22; }
  int64_t z_dim() const override { return config_.z_dim; }
  int64_t spatial_factor() const override { return config_.spatial_factor(); }
  int64_t temporal_factor() const override { return config_.temporal_factor(); }
  int64_t patch_size() const override { return 2; }

 private:
  Vae22Config config_;
  std::shared_ptr<vae_parts::Encoder22> encoder_;
  std::shared_ptr<vae_parts::Conv> conv1_, conv2_;
  std::shared_ptr<vae_parts::Decoder22> decoder_;
};
TORCH_MODULE(Wan22Vae);

}  // namespace wt::wan
