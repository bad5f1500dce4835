// Video latents <-> patch tokens, in Wan's layouts.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace wt::wan {

using Patch = std::array<int64_t, 3>;  // (frames, height, width)

// The token grid (F/pf, H/ph, W/pw) of latents [.., F, H, W]; UsageError
// naming the axis when a size is not a multiple of the patch.
std::array<int64_t, 3> token_grid(at::IntArrayRef latent_sizes, Patch patch);

// [B, C, F, H, W] -> [B, f*h*w, pf*ph*pw*C]: tokens in (f, h, w) order, each
// token's channels in (pf, ph, pw, C) order, the layout of WanModel's head.
at::Tensor patchify(const at::Tensor& x, Patch patch);

// The inverse: [B, f*h*w, pf*ph*pw*C] -> [B, C, f*pf, h*ph, w*pw].
at::Tensor unpatchify(const at::Tensor& tokens, std::array<int64_t, 3> grid, Patch patch, int64_t channels);

}  // namespace wt::wan
