// The context of a VACE model (model_type vace), built as Wan2.1's vace.py
// builds it (WanVace.prepare_source, vace_encode_frames, vace_encode_masks,
// vace_latent), for `wansample --src-video/--src-mask/--src-ref-images` and
// `wandata encode`'s control files:
//
//   mask    binarised (> 0.5); 1 where the model is to make the pixels
//   frames  inactive = video * (1 - mask), reactive = video * mask, each
//           VAE-encoded: 2 z_dim channels
//   masks   each s x s pixel block of a frame folded into s^2 channels
//           (s the VAE's spatial factor: 64 channels for Wan2.1's VAE),
//           frames brought to the latent frames by nearest-exact
//   refs    each reference picture VAE-encoded alone as a leading latent
//           frame (its reactive half and its mask zero)
//
//   context = [inactive, reactive, mask] [2 z_dim + s^2, refs + 1 + k, H/s, W/s]
//
// The noise and the sampled latents have the references' frames too; the
// decode drops them (drop_reference_frames).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

struct VaceSource {
  at::Tensor video;                    // [3, F, H, W] in [-1, 1]; undefined: zeros (mid grey), as released
  at::Tensor mask;                     // [1, F, H, W] in [0, 1]; undefined: ones (make every pixel)
  std::vector<at::Tensor> references;  // [3, H, W] in [-1, 1] each, at the video's size (fit_reference)
};

// The context's channels for a VAE: 2 z_dim + spatial_factor^2 (Wan2.1's: 96).
int64_t vace_context_channels(const VideoVae& vae);

// The VACE context [vace_context_channels, refs + 1 + k, H/s, W/s] fp32 of
// `source` for a video of F = 1 + 4k frames of H x W. UsageError naming the
// input whose size or frame count does not fit.
at::Tensor vace_context(VideoVae& vae, const VaceSource& source, int64_t frames, int64_t height, int64_t width);

// The mask channels alone (vace_encode_masks): `mask` [1, F, H, W] ->
// [s^2, refs + (F + 3) / 4, H/s, W/s], channel i * s + j holding pixel
// (i, j) of each s x s block; the references' frames zero.
at::Tensor vace_mask_channels(const at::Tensor& mask, int64_t spatial_factor, int64_t references);

// A reference picture [3, h, w] fitted to the video's H x W as prepare_source
// fits one of another size: scaled (bilinear) to fit inside, centred on white.
at::Tensor fit_reference(const at::Tensor& picture, int64_t height, int64_t width);

// The first `frames` frames of a control video (or mask video) file, each
// scaled to cover `height` x `width` and cut around the centre, as [3,
// frames, height, width] in [-1, 1]. UsageError naming the file when it
// has fewer frames or cannot be read.
at::Tensor read_control_video(const std::string& path, int64_t frames, int64_t height, int64_t width);
// A mask video's pixels as prepare_source reads them: the red channel of
// [3, F, H, W] in [-1, 1] brought to [0, 1] -> [1, F, H, W].
at::Tensor mask_of_video(const at::Tensor& video);

// Sampled latents [(B,) C, refs + T, h, w] without the references' frames.
at::Tensor drop_reference_frames(const at::Tensor& latents, int64_t references);

}  // namespace wt::wan
