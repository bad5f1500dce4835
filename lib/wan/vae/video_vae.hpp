// A Wan video VAE, whichever it is: Wan2.1's (wan_vae.hpp: 16 latent
// channels, 4x8x8 compression) or Wan2.2's (wan22_vae.hpp: 48 channels,
// 4x16x16, the VAE of TI2V-5B), so that encoding, decoding and sampling need
// not know which; and the factory that tells them apart by the tensors of a
// weights file:
//
//   auto vae = wt::wan::open_video_vae("Wan2.2_VAE.pth");  // or Wan2.1_VAE.pth
//   vae->description();                                   // "Wan2.2 VAE (48 channels, 4x16x16)"
//   auto latents = vae->encode(video);                    // [1, 3, 121, 704, 1280] -> [1, 48, 31, 44, 80]
//   vae->decode(latents, [&](const at::Tensor& frames) { /* write them */ });
//
// Which VAE a file holds: the decoder's last conv (decoder.head.2.weight)
// makes 3 channels in Wan2.1 (RGB) and 12 in Wan2.2 (2x2 patches of RGB),
// and the encoder's first (encoder.conv1.weight) reads as many; a file with
// neither, or with the two disagreeing, is no Wan VAE. Both VAEs' released
// files load by their official names (Wan2.1_VAE.pth, Wan2.2_VAE.pth,
// ComfyUI's safetensors), and by diffusers' names (vae_weights.hpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"

namespace wt::wan {

class VideoVae : public torch::nn::Module {
 public:
  // video [B, 3, 1 + 4k, H, W] in [-1, 1], H and W multiples of
  // spatial_factor() -> normalised latents [B, z_dim(), latent_frames(1 +
  // 4k), H / s, W / s], fp32. Computed in the weights' dtype on their device;
  // through tiles when set_tiling's are smaller than the video.
  at::Tensor encode(const at::Tensor& video);

  // latents [B, z_dim(), t, h, w] (normalised) -> video [B, 3,
  // video_frames(t), s h, s w], fp32, clamped to [-1, 1], handed to `sink`
  // chunk by chunk as it is made (the first frame, then temporal_factor()
  // frames per latent frame), so that a long video is never held whole
  // (tiled: once every tile is decoded).
  using FrameSink = std::function<void(const at::Tensor& frames)>;
  void decode(const at::Tensor& latents, const FrameSink& sink);
  // The same video, whole.
  at::Tensor decode(const at::Tensor& latents);

  // Tiled encode and decode (vae_tiling.hpp), as diffusers' enable_tiling;
  // nullopt, the default: whole frames.
  // SettingError (setting vae_tiling) for tiles check_tiling refuses.
  void set_tiling(std::optional<VaeTiling> tiling);
  const std::optional<VaeTiling>& tiling() const { return tiling_; }

  // The passes over whole frames that encode and decode tile: encode_whole
  // as encode, decode_whole as decode but not clamped.
  virtual at::Tensor encode_whole(const at::Tensor& video) = 0;
  virtual void decode_whole(const at::Tensor& latents, const FrameSink& sink) = 0;

  virtual VideoVaeConfig video_config() const = 0;
  virtual VaeVersion version() const = 0;
  virtual int64_t z_dim() const = 0;
  virtual int64_t spatial_factor() const = 0;   // pixels per latent along H and W
  virtual int64_t temporal_factor() const = 0;  // frames per latent frame after the first
  virtual int64_t patch_size() const = 0;       // pixels a side of the patches the encoder reads (Wan2.2: 2)
  // "Wan2.1 VAE (16 channels, 4x8x8)". (Module::name() is the module's own.)
  std::string description() const { return video_config().description(); }
  // Latent frames of `frames` video frames (1 + 4k), and back.
  int64_t latent_frames(int64_t frames) const { return 1 + (frames - 1) / temporal_factor(); }
  int64_t video_frames(int64_t latent_frames) const { return 1 + (latent_frames - 1) * temporal_factor(); }

 private:
  std::optional<VaeTiling> tiling_;
};

// A diffusers AutoencoderKLWan folder (`vae/` of a pipeline, or the
// pipeline's root holding it; diffusers_folder.hpp): its config.json gives
// the shape where no config is given. nullopt for a file; UsageError for a
// folder with no VAE in it.
std::optional<ModelFolder> vae_folder(const std::string& path);
// The weights file of `path`: its own, or its folder's.
std::string vae_weights_file(const std::string& path);

// Which VAE `weights` holds, from its tensors' shapes (the top of this
// file); UsageError naming the file when it holds neither.
VaeVersion detect_vae_version(const TensorSource& weights);

// The shape of the VAE in `weights_path` (read for its tensors' names and
// shapes only; empty: no file, the config decides, else Wan2.1), from
// `config_path` (a JSON of vae_config.hpp; empty: that VAE's released
// shape). UsageError for a file that is no Wan VAE, a bad config, or a
// config of the other VAE than the weights hold.
VideoVaeConfig video_vae_config(const std::string& weights_path, const std::string& config_path = "");

// A VAE of `config`, its weights drawn as a fresh module's, in `dtype`
// (fp32 or bf16), frozen.
std::shared_ptr<VideoVae> make_video_vae(const VideoVaeConfig& config, at::ScalarType dtype = at::kFloat);

// The VAE in `weights_path` (.pth, safetensors or index), of the kind its
// tensors say, shaped by `config_path` (empty: the released shape), its
// weights loaded by name in `dtype`, on the CPU. UsageError as
// video_vae_config and for weights that do not fit (naming them).
std::shared_ptr<VideoVae> open_video_vae(const std::string& weights_path, const std::string& config_path = "",
                                         at::ScalarType dtype = at::kFloat);
// The same with the shape read already (video_vae_config of the same file).
std::shared_ptr<VideoVae> open_video_vae(const std::string& weights_path, const VideoVaeConfig& config,
                                         at::ScalarType dtype = at::kFloat);

}  // namespace wt::wan
