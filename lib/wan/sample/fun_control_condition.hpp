// The condition of a Fun-Control model (VideoX-Fun's Wan2.1-Fun-Control:
// an i2v model with in_dim 3 out_dim, WanConfig::fun_control()), built as
// videox_fun/pipeline/pipeline_wan_fun_control.py builds it, for
// `wansample --control-video/--image/--ref-image` and `wandata encode
// --condition fun-control`:
//
//   y         [control latents, start latents]: the control video through the
//             VAE (zeros without one), and the start picture alone through
//             the VAE in latent frame 0, zeros after (all zeros without one,
//             or for a single latent frame). Wan2.2-Fun's layout
//             (WanConfig::fun_control_with_mask(), pipeline_wan2_2_fun_control.py)
//             is [control latents, mask, masked video latents]: after the
//             control's, the start picture's i2v condition (image_condition.hpp:
//             the mask of 1 - the pixel mask folded 4 frames to a latent frame,
//             and the video [start, zeros...] through the VAE in one pass;
//             VideoX-Fun's examples give the start picture as such a video
//             and mask), all zeros without one (the pipeline's all-masked case)
//   clip_fea  the CLIP features of the reference picture, else of the start
//             picture; zeros without either (the image branch still runs)
//   full_ref  a ref_conv model's (V1.1): the reference picture alone through
//             the VAE, its one latent frame; undefined without one (the model
//             reads zeros)
//
// The control video is at the sample's size (read_control_video fits it);
// a picture of another size is resized to it (bicubic, as VideoX-Fun's
// get_image_latent resizes it) for the VAE, and CLIP reads it as it is. Each goes through the VAE on its own, as the
// pipeline encodes them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/model/model_condition.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

struct FunControlSource {
  at::Tensor control;    // [3, F, H, W] in [-1, 1]; undefined: none
  at::Tensor start;      // [3, h, w] in [-1, 1]: the first frame to keep; undefined: none
  at::Tensor reference;  // [3, h, w] in [-1, 1]: what to show (ref_conv and CLIP); undefined: none
};

// y [2 z, 1 + k, H/s, W/s] fp32 for a video of F = 1 + 4k frames of H x W
// ([2 z + 4, ...] `with_mask`, Wan2.2-Fun's layout). UsageError naming the
// input whose size or frame count does not fit.
at::Tensor fun_control_y(VideoVae& vae, const FunControlSource& source, int64_t frames, int64_t height, int64_t width,
                         bool with_mask = false);

// A picture resized to H x W alone through the VAE: its latent frame [z, H/s, W/s] fp32.
at::Tensor picture_latents(VideoVae& vae, const at::Tensor& picture, int64_t height, int64_t width);

// The whole condition, batched ([1, ...]) on `device`: y, the CLIP features
// (`clip` may be null only when the model has no CLIP branch or neither
// picture is given) and a ref_conv model's full_ref. UsageError for a
// reference picture given to a model without ref_conv (VideoX-Fun refuses
// it too).
ModelCondition fun_control_condition(const WanConfig& config, VideoVae& vae, ClipVisionImpl* clip,
                                     const FunControlSource& source, int64_t frames, int64_t height, int64_t width,
                                     const c10::Device& device);

}  // namespace wt::wan
