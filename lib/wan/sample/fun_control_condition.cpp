#include "wantrain/wan/sample/fun_control_condition.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/sample/image_condition.hpp"

namespace wt::wan {
namespace {

void check_picture(const at::Tensor& picture, const char* what) {
  if (picture.defined() && (picture.dim() != 3 || picture.size(0) != 3))
    throw Error(fmt::format("the Fun-Control {} is [3, H, W], got [{}]", what, fmt::join(picture.sizes(), ",")));
}

}  // namespace

at::Tensor picture_latents(VideoVae& vae, const at::Tensor& picture, int64_t height, int64_t width) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(vae.parameters().front().device());
  const auto sized =
      picture.size(1) == height && picture.size(2) == width ? picture : resize_picture(picture, {height, width});
  return vae.encode(sized.to(options).unsqueeze(1).unsqueeze(0))[0].select(1, 0).to(torch::kFloat32);
}

at::Tensor fun_control_y(VideoVae& vae, const FunControlSource& source, int64_t frames, int64_t height, int64_t width,
                         bool with_mask) {
  const int64_t s = vae.spatial_factor(), t = vae.temporal_factor();
  if (frames < 1 || (frames - 1) % t != 0)
    throw UsageError(fmt::format("a Fun-Control condition needs {}k + 1 frames, got {}", t, frames));
  if (height % s || width % s || height < s || width < s)
    throw UsageError(
        fmt::format("a Fun-Control condition of {}x{} is not a multiple of the VAE's {} pixels", width, height, s));
  const std::vector<int64_t> video_shape{3, frames, height, width};
  if (source.control.defined() && source.control.sizes() != at::IntArrayRef(video_shape))
    throw UsageError(
        fmt::format("the Fun-Control control video must be [{}] (3 channels, frames, height, width), got [{}]",
                    fmt::join(video_shape, ","), fmt::join(source.control.sizes(), ",")));
  check_picture(source.start, "start picture");
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(vae.parameters().front().device());
  const std::vector<int64_t> latent_shape{vae.z_dim(), 1 + (frames - 1) / t, height / s, width / s};
  const auto control = source.control.defined() ? vae.encode(source.control.to(options).unsqueeze(0))[0].to(options)
                                                : torch::zeros(latent_shape, options);
  if (with_mask) {  // Wan2.2-Fun: the start picture's i2v condition, zeros without one
    if (!source.start.defined())
      return torch::cat(
          {control, torch::zeros({4 + vae.z_dim(), latent_shape[1], latent_shape[2], latent_shape[3]}, options)}, 0);
    const auto& start = source.start;
    const auto sized =
        start.size(1) == height && start.size(2) == width ? start : resize_picture(start, {height, width});
    return torch::cat({control, image_condition_y(vae, sized.to(options), at::Tensor(), frames).to(options)}, 0);
  }
  auto start = torch::zeros(latent_shape, options);
  // The pipeline keeps the start frame only where there is a frame after it.
  if (source.start.defined() && latent_shape[1] > 1)
    start.select(1, 0).copy_(picture_latents(vae, source.start, height, width));
  return torch::cat({control, start}, 0);
}

ModelCondition fun_control_condition(const WanConfig& config, VideoVae& vae, ClipVisionImpl* clip,
                                     const FunControlSource& source, int64_t frames, int64_t height, int64_t width,
                                     const c10::Device& device) {
  if (!config.fun_control()) throw Error("fun_control_condition: the model is not a Fun-Control model");
  if (source.reference.defined() && !config.ref_conv)
    throw UsageError(
        "a Fun-Control reference picture is for a model with ref_conv (V1.1, add_ref_conv); this one has none");
  check_picture(source.reference, "reference picture");
  ModelCondition condition;
  condition.y =
      fun_control_y(vae, source, frames, height, width, config.fun_control_with_mask()).unsqueeze(0).to(device);
  if (config.image_branch()) {
    const auto& picture = source.reference.defined() ? source.reference : source.start;
    if (picture.defined() && !clip) throw Error("fun_control_condition: a picture's CLIP features need the encoder");
    condition.clip_fea = (picture.defined() ? image_clip_features(*clip, picture, {})
                                            : torch::zeros({config.image_tokens, config.image_dim}))
                             .unsqueeze(0)
                             .to(device, torch::kFloat32);
  }
  if (source.reference.defined())
    condition.full_ref = picture_latents(vae, source.reference, height, width).unsqueeze(0).to(device);
  return condition;
}

}  // namespace wt::wan
