// Pixels between the media layer and the VAE: 8-bit RGB frames and video
// tensors [3, F, H, W] in [-1, 1], as Wan's pipelines scale them
// (x / 127.5 - 1 in, (x + 1) * 127.5 rounded and clamped out).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "wantrain/media/image.hpp"

namespace wt::wan {

// RGB frames of one size -> [3, F, H, W] fp32.
at::Tensor frames_to_video(const std::vector<media::Image>& frames);
// [3, F, H, W] (any float dtype and device) -> F RGB frames.
std::vector<media::Image> video_to_frames(const at::Tensor& video);

}  // namespace wt::wan
