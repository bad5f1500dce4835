// The start frame of a Wan2.2-Fun-5B-Control model's condition
// (WanConfig::holds_start_frame()): y is [control latents (z), mask (4),
// masked video latents (z)], and a start is given where the mask keeps all
// of latent frame 0 (pipeline_wan2_2_fun_control.py replaces the latents
// only when no pixel of frame 0 is to be made). That frame's latents are
// then held in x's frame 0 at timestep 0, in sampling (sampler.hpp) and in
// training (keep_first_frame, flow_matching.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace wt::wan {

// Per row of y [B, 2 z + 4, F, H, W]: whether it holds a start frame (a
// start dropped by --start-drop, or none given, has mask 0 there).
std::vector<bool> start_given(const at::Tensor& y, int64_t out_dim);

// y's start latents, the masked video's latent frame 0: [B, z, 1, H, W].
at::Tensor start_latents(const at::Tensor& y, int64_t out_dim);

}  // namespace wt::wan
