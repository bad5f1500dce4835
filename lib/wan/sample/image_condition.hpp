// The condition of an image-to-video model (Wan2.1 I2V/FLF2V, Wan2.2 I2V),
// built as Wan's image2video.py and first_last_frame2video.py build it, for
// `wandata encode --condition` and `wansample --image`:
//
//   y = [mask (4 channels), VAE latents of the video [first, zeros..., (last)]]
//
// The mask marks the given pixel frames: 1 for the first (and, for flf2v,
// the last), 0 elsewhere; the first pixel frame repeated 4 times so that
// F = 1 + 4k frames make 4 (1 + k) values, folded 4 to a latent frame as its
// channels. Latent frame 0 is all ones; with a last frame, channel 3 of the
// last latent frame is 1. The zero frames are mid-grey ([-1, 1] pixels),
// encoded with the given frames in one pass.
//
// The CLIP features are those of the picture(s), first then last, each
// resized to the tower's 224 px (encoders/clip_vision.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

// The 4-channel frame mask [4, 1 + k, h, w] for F = 1 + 4k pixel frames.
at::Tensor frame_mask(int64_t frames, int64_t latent_height, int64_t latent_width, bool last_frame);

// y [4 + z_dim, 1 + k, H/s, W/s] fp32 for `first` (and `last`, when
// defined) [3, H, W] in [-1, 1] at the video's size, and F = 1 + 4k frames
// (the VAE's spatial factor s: 8 for Wan2.1's, 16 for Wan2.2's).
at::Tensor image_condition_y(VideoVae& vae, const at::Tensor& first, const at::Tensor& last, int64_t frames);

// CLIP features [images * tokens, dim] fp32 of `first` (then `last`).
at::Tensor image_clip_features(ClipVisionImpl& clip, const at::Tensor& first, const at::Tensor& last);

// The video size Wan's image2video.py samples a picture of `height` x
// `width` at: the picture's aspect ratio within `max_area` pixels, each side
// floored to a multiple of `multiple` (VAE stride x patch: 16).
struct VideoSize {
  int64_t height = 0, width = 0;
};
VideoSize image_video_size(int64_t height, int64_t width, int64_t max_area, int64_t multiple = 16);

// The video size Wan2.2's textimage2video.py samples a picture at (its
// best_output_size): within `max_area` pixels, sides multiples of
// `multiple` (VAE stride x patch: 32 for TI2V-5B), the one of two candidates
// (width fitted first, or height) whose aspect ratio is nearer the picture's.
// The picture is then scaled to cover it and cut around the centre.
VideoSize ti2v_video_size(int64_t height, int64_t width, int64_t max_area, int64_t multiple = 32);

// `picture` [3, h, w] in [-1, 1] resized (bicubic) to `size`, as
// image2video.py resizes it for the VAE.
at::Tensor resize_picture(const at::Tensor& picture, const VideoSize& size);

// `picture` scaled (bicubic) to cover `height` x `width` and cut to it around
// the centre: a last frame of another size than the first, as Wan's
// first_last_frame2video.py fits it before anything else sees it.
at::Tensor cover_picture(const at::Tensor& picture, int64_t height, int64_t width);

// A picture file (PNG, JPEG, ... or a video's first frame) as [3, H, W] in
// [-1, 1] at its own size; UsageError naming the file otherwise.
at::Tensor read_picture(const std::string& path);

}  // namespace wt::wan
