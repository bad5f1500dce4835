#include "wantrain/wan/sample/picture_start.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/sample/image_condition.hpp"

namespace wt::wan {

PictureStart start_from_picture(const WanConfig& config, VideoVae& vae, ClipVisionImpl* clip, const at::Tensor& first,
                                const at::Tensor& last, const std::vector<int64_t>& shape, const c10::Device& device) {
  if (config.fun_control())  // its y is a control video's and a start frame's (fun_control_condition.hpp)
    throw Error("start_from_picture: a Fun-Control model starts from fun_control_condition");
  PictureStart start;
  const VideoSize size{shape[3] * vae.spatial_factor(), shape[4] * vae.spatial_factor()};
  torch::NoGradGuard no_grad;
  if (config.image_conditioned()) {
    const int64_t frames = 1 + (shape[2] - 1) * vae.temporal_factor();
    // A last frame of another size is fitted to the first's (first_last_frame2video.py).
    const auto fitted_last = last.defined() ? cover_picture(last, first.size(1), first.size(2)) : at::Tensor();
    start.image.y = image_condition_y(vae, resize_picture(first, size),
                                      last.defined() ? resize_picture(fitted_last, size) : at::Tensor(), frames)
                        .unsqueeze(0)
                        .to(device);
    if (clip) start.image.clip_fea = image_clip_features(*clip, first, fitted_last).unsqueeze(0).to(device);
    return start;
  }
  const auto picture = cover_picture(first, size.height, size.width);
  const auto weights = vae.parameters().front();
  start.first_frame = vae.encode(picture.unsqueeze(1).unsqueeze(0).to(weights.device())).to(device, at::kFloat);
  if (start.first_frame.size(1) != shape[1] || start.first_frame.sizes().slice(3) != at::IntArrayRef(shape).slice(3))
    throw SettingError("image",
                       fmt::format("the VAE makes latents [{}] of the picture, the model samples [{}]: "
                                   "a {}-channel model needs its own VAE",
                                   fmt::join(start.first_frame.sizes(), ","), fmt::join(shape, ","), shape[1]));
  return start;
}

}  // namespace wt::wan
