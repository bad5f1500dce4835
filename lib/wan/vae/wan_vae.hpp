// The video VAE of Wan2.1 (the official wan/modules/vae.py WanVAE_, with
// the latent normalisation and clamping of its WanVAE wrapper), in LibTorch,
// under the official parameter names, so that the released Wan2.1_VAE.pth
// loads by name (commit f1f7c88 of Wan-Video/Wan2.1 read):
//
//   encoder.conv1.{weight,bias}                   [dim, 3, 3, 3, 3]     causal conv
//   encoder.downsamples.N.                        level by level: num_res_blocks residual blocks (each
//                                                 followed by an attention block where the level's scale
//                                                 1, 1/2, 1/4 ... is in attn_scales), then, but for the
//                                                 last level, a resample
//   encoder.middle.0, .2 (residual), .1 (attention)
//   encoder.head.0.gamma [c, 1, 1, 1], encoder.head.2.{weight,bias} [2 z_dim, c, 3, 3, 3]
//   conv1.{weight,bias}  [2 z_dim, 2 z_dim, 1, 1, 1]   -> mu (first z_dim channels) and log-variance
//   conv2.{weight,bias}  [z_dim, z_dim, 1, 1, 1]
//   decoder.conv1 [c, z_dim, 3, 3, 3], decoder.middle.{0,1,2}, decoder.upsamples.N (num_res_blocks + 1
//   residual blocks per level, then a resample but for the last; the official scale of decoder level i
//   is 2^(i + 2 - levels)), decoder.head.0.gamma, decoder.head.2 [3, dim, 3, 3, 3]
//
// with, in a residual block (in -> out channels):
//   residual.0.gamma [in, 1, 1, 1], residual.2.{weight,bias} [out, in, 3, 3, 3],
//   residual.3.gamma [out, 1, 1, 1], residual.6.{weight,bias} [out, out, 3, 3, 3],
//   shortcut.{weight,bias} [out, in, 1, 1, 1] (only where in != out);
// an attention block: norm.gamma [c, 1, 1], to_qkv.{weight,bias} [3c, c, 1, 1], proj [c, c, 1, 1];
// a resample of c channels: resample.1.{weight,bias} [c, c, 3, 3] (down, stride 2 after one zero
//   row and column at the bottom and right) or [c/2, c, 3, 3] (up: nearest 2x first), and where it
//   also halves or doubles time, time_conv [c, c, 3, 1, 1] (down) or [2c, c, 3, 1, 1] (up).
//
// Semantics. Norms are L2 over channels times sqrt(c) and gamma, then SiLU.
// A causal conv sees each frame and the two before it (zeros before the
// first). Attention is one head over the h*w positions of each frame,
// scaled by 1/sqrt(c). encode takes the first frame alone, then chunks of 4
// frames; every causal conv keeps the last two frames of its input between
// chunks, so that chunks give what the whole video would and memory does
// not grow with length. Halving time: the first frame passes as it is,
// then a stride-2 conv over (last frame of the previous chunk, chunk).
// decode takes one latent frame at a time; doubling time: the first frame
// passes, every later one goes through a causal conv to 2c channels whose
// halves become two frames. Latents are (mu - mean) / std per channel in
// fp32; decoded video is clamped to [-1, 1].
//
// Where it knowingly differs, in the order of sums only: per-frame 2-D
// convs run as 3-D convs of depth 1 on the video as it lies (no (b t)
// reshuffle); nearest 2x upsampling and the 3x3 conv after it run as four
// 2x2 convs of the small frames (4 taps a pixel instead of 9); fp32 convs
// go to oneDNN directly; a conv's cache always holds two frames, zeros
// before the first, which is the official one-frame cache plus one zero
// frame of padding. Attention after level blocks (attn_scales, empty in
// Wan2.1) is run as the middle one; the official encode and decode would
// stop there (its loops pass the cache to an attention block that takes none).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>

#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

namespace vae_parts {
struct Encoder;
struct Decoder;
struct Conv;
}  // namespace vae_parts

class WanVaeImpl : public VideoVae {
 public:
  // Parameters in `dtype` (fp32 or bf16; never an fp32 copy of bf16
  // weights), frozen, drawn as PyTorch draws a fresh module's. UsageError
  // for a config check_vae_config refuses.
  explicit WanVaeImpl(const VaeConfig& config, at::ScalarType dtype = at::kFloat);

  // video [B, 3, 1 + 4k, H, W] in [-1, 1], H and W multiples of 8 (of
  // config().spatial_factor()) -> normalised latents [B, z_dim, 1 + k,
  // H/8, W/8], fp32. Computed in the weights' dtype on their device; fp32
  // weights are the default for encoding, since bf16 shifts the latents.
  at::Tensor encode_whole(const at::Tensor& video) override;

  // latents [B, z_dim, t, h, w] (normalised) -> video [B, 3, 1 + 4 (t - 1),
  // 8h, 8w], fp32, not clamped (VideoVae::decode clamps), handed to `sink`
  // chunk by chunk as it is made (the first frame, then 4 frames per latent
  // frame, each [B, 3, n, 8h, 8w] fp32), so that a long video is written
  // without ever being held whole.
  void decode_whole(const at::Tensor& latents, const FrameSink& sink) override;

  const VaeConfig& config() const { return config_; }
  VideoVaeConfig video_config() const override;
  VaeVersion version() const override { return VaeVersion::Wan21; }
  int64_t z_dim() const override { return config_.z_dim; }
  int64_t spatial_factor() const override { return config_.spatial_factor(); }
  int64_t temporal_factor() const override { return config_.temporal_factor(); }
  int64_t patch_size() const override { return 1; }

 private:
  VaeConfig config_;
  std::shared_ptr<vae_parts::Encoder> encoder_;
  std::shared_ptr<vae_parts::Conv> conv1_, conv2_;
  std::shared_ptr<vae_parts::Decoder> decoder_;
};
TORCH_MODULE(WanVae);

}  // namespace wt::wan
