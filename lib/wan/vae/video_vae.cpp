#include "wantrain/wan/vae/video_vae.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/vae/vae_weights.hpp"
#include "wantrain/wan/vae/wan22_vae.hpp"
#include "wantrain/wan/vae/wan_vae.hpp"

namespace wt::wan {
namespace {

// The RGB channels a conv shape of the named tensor says the VAE works in
// (`dim` 0: its outputs, 1: its inputs): 3 (Wan2.1) or 12 (Wan2.2's 2x2
// patches); nullopt where the file has no such 5-D tensor.
std::optional<int64_t> pixel_channels(const TensorSource& weights, const std::string& name, size_t dim) {
  const auto it = weights.shapes.find(name);
  if (it == weights.shapes.end() || it->second.size() != 5) return std::nullopt;
  return it->second[dim];
}

std::optional<VaeVersion> version_of(int64_t channels) {
  if (channels == 3) return VaeVersion::Wan21;
  if (channels == 12) return VaeVersion::Wan22;
  return std::nullopt;
}

}  // namespace

void VideoVae::set_tiling(std::optional<VaeTiling> tiling) {
  if (tiling) check_tiling(*tiling, spatial_factor(), "vae_tiling");
  tiling_ = tiling;
}

at::Tensor VideoVae::encode(const at::Tensor& video) {
  // A video the VAE cannot take goes whole, for encode_whole's line about its shape.
  const int64_t s = spatial_factor();
  const bool fits = video.dim() == 5 && video.size(3) % s == 0 && video.size(4) % s == 0;
  if (tiling_ && fits && encode_is_tiled(*this, *tiling_, video.size(3), video.size(4)))
    return tiled_encode(*this, video, *tiling_);
  return encode_whole(video);
}

void VideoVae::decode(const at::Tensor& latents, const FrameSink& sink) {
  const auto clamped = [&](const at::Tensor& frames) { sink(frames.clamp_(-1, 1)); };
  if (tiling_ && latents.dim() == 5 && decode_is_tiled(*this, *tiling_, latents.size(3), latents.size(4)))
    return tiled_decode(*this, latents, *tiling_, clamped);
  decode_whole(latents, clamped);
}

at::Tensor VideoVae::decode(const at::Tensor& latents) {
  const int64_t f = spatial_factor();
  at::Tensor video;
  int64_t done = 0;
  decode(latents, [&](const at::Tensor& frames) {
    if (!video.defined())
      video =
          torch::empty({latents.size(0), 3, video_frames(latents.size(2)), f * latents.size(3), f * latents.size(4)},
                       frames.options());  // [B, 3, 1 + 4 (t - 1), H, W], fp32
    video.narrow(2, done, frames.size(2)).copy_(frames);
    done += frames.size(2);
  });
  return video;
}

std::optional<ModelFolder> vae_folder(const std::string& path) {
  return path.empty() ? std::nullopt : find_model_folder(path, "vae", "diffusion_pytorch_model");
}

std::string vae_weights_file(const std::string& path) {
  const auto folder = vae_folder(path);
  return folder ? folder->weights : path;
}

VaeVersion detect_vae_version(const TensorSource& weights) {
  const auto head = pixel_channels(weights, "decoder.head.2.weight", 0);
  const auto input = pixel_channels(weights, "encoder.conv1.weight", 1);
  const auto by_head = head ? version_of(*head) : std::nullopt;
  const auto by_input = input ? version_of(*input) : std::nullopt;
  // Either tensor may be absent (the load then names it), but not both;
  // each there must say 3 or 12, and both the same.
  const bool known = (head || input) && (!head || by_head) && (!input || by_input);
  if (known && !(by_head && by_input && *by_head != *by_input)) return by_head ? *by_head : *by_input;
  const std::string what = (head ? fmt::format("its decoder.head.2.weight makes {} channels", *head)
                                 : std::string("it has no decoder.head.2.weight")) +
                           (input ? fmt::format(" and its encoder.conv1.weight reads {}", *input)
                                  : std::string(" and no encoder.conv1.weight"));
  throw UsageError(fmt::format(
      "{}: not a Wan video VAE: {}; the decoder's last conv makes, and the encoder's first reads, 3 channels in "
      "Wan2.1's VAE (RGB) and 12 in Wan2.2's (2x2 patches of RGB)",
      weights.path, what));
}

namespace {

// A diffusers AutoencoderKLWan config.json in the keys of vae_config.hpp:
// Wan2.2's when it is_residual (its decoder_base_dim is dec_dim).
VideoVaeConfig diffusers_vae_config(const std::string& config_json, const std::optional<VaeVersion>& weights,
                                    const std::string& weights_source) {
  const auto doc = nlohmann::json::parse(read_whole_file(config_json), nullptr, false);
  if (!doc.is_object() || doc.value("_class_name", std::string()) != "AutoencoderKLWan")
    throw UsageError(fmt::format("{}: not a diffusers AutoencoderKLWan config (its _class_name)", config_json));
  const bool residual = doc.contains("is_residual") && doc["is_residual"] == true;
  const nlohmann::json patch = residual ? nlohmann::json(2) : nlohmann::json(nullptr);  // Wan2.2's: 2x2 patches
  if (doc.contains("patch_size") && doc["patch_size"] != patch)
    throw UsageError(fmt::format("{}: key \"patch_size\": {}, not the {} VAE's {}", config_json,
                                 doc["patch_size"].dump(), residual ? "Wan2.2" : "Wan2.1", patch.dump()));
  nlohmann::json ours = nlohmann::json::object();
  if (doc.contains("base_dim")) ours["dim"] = doc["base_dim"];
  if (residual && doc.contains("decoder_base_dim") && !doc["decoder_base_dim"].is_null())
    ours["dec_dim"] = doc["decoder_base_dim"];
  for (const char* key :
       {"z_dim", "dim_mult", "num_res_blocks", "attn_scales", "temperal_downsample", "latents_mean", "latents_std"})
    if (doc.contains(key) && !doc[key].is_null()) ours[key] = doc[key];
  ours["version"] = residual ? "2.2" : "2.1";  // is_residual says which, whatever the weights hold
  return parse_video_vae_config(ours.dump(), config_json, weights, weights_source);
}

VideoVaeConfig config_for(const std::optional<VaeVersion>& weights, const std::string& weights_path,
                          const std::string& config_path) {
  if (!config_path.empty()) return load_video_vae_config(config_path, weights, "weights " + weights_path);
  if (const auto folder = vae_folder(weights_path))
    return diffusers_vae_config(folder->config, weights, "weights " + folder->weights);
  VideoVaeConfig c;  // the released shapes
  c.version = weights.value_or(VaeVersion::Wan21);
  return c;
}

// The weights and the VAE they hold.
TensorSource open_checked(const std::string& path, VaeVersion& version) {
  auto source = open_vae_weights(vae_weights_file(path));
  version = detect_vae_version(source);
  return source;
}

}  // namespace

VideoVaeConfig video_vae_config(const std::string& weights_path, const std::string& config_path) {
  std::optional<VaeVersion> version;
  if (!weights_path.empty()) {
    VaeVersion held{};
    open_checked(weights_path, held);
    version = held;
  }
  return config_for(version, weights_path, config_path);
}

std::shared_ptr<VideoVae> make_video_vae(const VideoVaeConfig& config, at::ScalarType dtype) {
  if (config.version == VaeVersion::Wan22) return std::make_shared<Wan22VaeImpl>(config.wan22, dtype);
  return std::make_shared<WanVaeImpl>(config.wan21, dtype);
}

std::shared_ptr<VideoVae> open_video_vae(const std::string& weights_path, const std::string& config_path,
                                         at::ScalarType dtype) {
  VaeVersion version{};
  const auto source = open_checked(weights_path, version);
  auto vae = make_video_vae(config_for(version, weights_path, config_path), dtype);
  load_weights(*vae, source);
  return vae;
}

std::shared_ptr<VideoVae> open_video_vae(const std::string& weights_path, const VideoVaeConfig& config,
                                         at::ScalarType dtype) {
  VaeVersion version{};
  const auto source = open_checked(weights_path, version);
  if (version != config.version)
    throw UsageError(fmt::format("weights {}: hold the {} VAE, and its config describes the {} VAE", weights_path,
                                 vae_version_name(version), vae_version_name(config.version)));
  auto vae = make_video_vae(config, dtype);
  load_weights(*vae, source);
  return vae;
}

}  // namespace wt::wan
