// Caption dropout (--text-drop): with probability p a training sample's text
// context is replaced by the unconditional context, so the model also learns
// the unconditional prediction that classifier-free guidance contrasts the
// prompt with. Without it, `wansample --cfg` extrapolates along a direction
// the model never saw.
//
// The unconditional context is wan/model/unconditional_context.hpp's (all
// zeros): training and every sampler take it from there, so they agree.
//
// A sample's draw is keyed by (seed, step, global sample index), like its
// noise, so it does not depend on the world size, micro-batching or restarts.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace wt::wan {

// Whether each sample's caption is dropped at `step`; p in [0, 1].
std::vector<bool> caption_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p);

// Image dropout (--image-drop) of an image-to-video model: whether each
// sample's CLIP features are zeroed at `step`, keyed as caption dropout is
// but drawn independently of it. drop_captions() applies it to clip_fea
// [B, T, D] as to a context.
std::vector<bool> image_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p);

// A Fun-Control model's control dropout (--control-drop, --start-drop), as
// VideoX-Fun's train_control.py zeroes its control latents and its start
// frame: whether each sample's control part (y's first channels, the
// control's latents), or its start part (the rest: the start frame's
// latents, and Wan2.2-Fun's mask), is zeroed at `step`, keyed as caption
// dropout is, each drawn independently.
std::vector<bool> control_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p);
std::vector<bool> start_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p);
// y [B, C + S, F, H, W] (C `control_channels`) with the drawn parts zeroed:
// a new tensor, or `y` itself when nothing is dropped.
at::Tensor drop_fun_control(const at::Tensor& y, int64_t control_channels, const std::vector<bool>& control,
                            const std::vector<bool>& start);

// A Fun-Control V1.1 model trained on data with a reference frame
// (wan/model/reference_frame.hpp): whether each sample is shown its other
// frame as the reference at `step` (--ref-other-frame P; else its start),
// and whether that reference's latents are zeroed (--ref-drop P), each
// keyed as caption dropout is and drawn independently. A sample of one
// latent frame (a still) is always shown its start: it has no other frame.
std::vector<bool> reference_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p,
                                  int64_t frames);
std::vector<bool> reference_drops(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p);

// The first-frame condition (--condition first-frame --first-frame-prob P)
// of a Wan2.2 TI2V model: whether each sample keeps its first frame at
// `step`, keyed as caption dropout is but drawn independently of it and of
// the image drop. A sample of one latent frame (a still) never keeps it:
// nothing would be left to learn (`frames`: the batch's latent frames).
std::vector<bool> first_frame_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, double p,
                                    int64_t frames);

// context [B, L, D] with the rows whose drop is true replaced by the
// unconditional context: a new tensor, or `context` itself when nothing is
// dropped; `context` is never changed.
at::Tensor drop_captions(const at::Tensor& context, const std::vector<bool>& drops);

// The same with the draws as a mask already on the context's device:
// keep [B] bool, false where the caption is dropped (no host-to-device copy
// here, as the std::vector<bool> form must make).
at::Tensor drop_captions(const at::Tensor& context, const at::Tensor& keep);

}  // namespace wt::wan
