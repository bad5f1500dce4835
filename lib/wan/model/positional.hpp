// Position encodings of WanModel: the sinusoidal timestep embedding and the
// 3D rotary embedding (RoPE) of self-attention.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace wt::wan {

// [B] timesteps -> [B, dim] fp32: for i < dim/2, angle_i = t * 10000^(-i/(dim/2)),
// then [cos(angle) | sin(angle)] (cos half first, as Wan). Computed in fp64.
at::Tensor sinusoidal_embedding(const at::Tensor& timesteps, int64_t dim);

// The channel counts of the frame, height and width parts of a head of
// `head_dim` channels: head_dim - 4*(head_dim/6), 2*(head_dim/6), 2*(head_dim/6).
std::array<int64_t, 3> rope_axis_channels(int64_t head_dim);

// cos and sin of RoPE's angles for a token grid (f, h, w) in (f, h, w) order:
// each [f*h*w, head_dim/2] fp32 on `device`. Pair j of axis a (d_a channels, position p
// from 0) turns by p * 10000^(-2j/d_a). Angles are evaluated in fp64.
struct RopeTable {
  at::Tensor cos, sin;
};
RopeTable rope_table(std::array<int64_t, 3> grid, int64_t head_dim, at::Device device = at::kCPU);

// Rotates adjacent channel pairs (2j, 2j+1) = (real, imag) of x [B, L, heads,
// head_dim] by the table's angles (on x's device) and multiplies by `scale`
// (attention folds its 1/sqrt(head_dim) into q's rotation); returns fp32.
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, double scale = 1.0);

}  // namespace wt::wan
