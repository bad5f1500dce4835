// What a picture gives a sample to start from, as Wan's scripts prepare it:
// an image-to-video model's condition (image2video.py and
// first_last_frame2video.py: the picture resized to the video, encoded by
// the VAE with the frame mask into y; CLIP's features of the picture as it
// is) or a TI2V model's first latent frame, held through sampling
// (textimage2video.py: the picture scaled to cover the video, cut around
// its centre, encoded by the VAE). For wansample --image and the --image of
// a prompt file's line.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

struct PictureStart {
  ModelCondition image;    // image-to-video: y [1, 4 + z, F, H, W] and CLIP features [1, N, D], fp32
  at::Tensor first_frame;  // TI2V: [1, z, 1, H, W] fp32
};

// `first` (and an flf2v model's `last`; undefined otherwise) [3, h, w] in
// [-1, 1] at any size, for a sample of latents `shape` [1, C, F, H, W] of a
// `config` model, on `device`. `clip`: the CLIP encoder of a model with the
// CLIP branch (image_branch()), else nullptr. UsageError when the VAE's
// latents do not fit the model's.
PictureStart start_from_picture(const WanConfig& config, VideoVae& vae, ClipVisionImpl* clip, const at::Tensor& first,
                                const at::Tensor& last, const std::vector<int64_t>& shape, const c10::Device& device);

}  // namespace wt::wan
