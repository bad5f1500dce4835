#include "wantrain/wan/model/positional.hpp"

#include <torch/torch.h>

namespace wt::wan {

at::Tensor sinusoidal_embedding(const at::Tensor& timesteps, int64_t dim) {
  const int64_t half = dim / 2;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(timesteps.device());
  auto exponents = torch::arange(half, f64).div(static_cast<double>(half));                    // [half]
  auto angles = torch::outer(timesteps.to(torch::kFloat64), torch::pow(10000.0, -exponents));  // [B, half]
  return torch::cat({torch::cos(angles), torch::sin(angles)}, 1).to(torch::kFloat32);          // [B, dim]
}

std::array<int64_t, 3> rope_axis_channels(int64_t head_dim) {
  const int64_t sixth = head_dim / 6;
  return {head_dim - 4 * sixth, 2 * sixth, 2 * sixth};
}

RopeTable rope_table(std::array<int64_t, 3> grid, int64_t head_dim, at::Device device) {
  const auto channels = rope_axis_channels(head_dim);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<at::Tensor> parts;  // per axis: [f, h, w, d_a/2] angles
  for (int axis = 0; axis < 3; ++axis) {
    const int64_t pairs = channels[axis] / 2;
    auto inv_freq = torch::pow(10000.0, -torch::arange(0, channels[axis], 2, f64) / double(channels[axis]));  // [pairs]
    auto angles = torch::outer(torch::arange(grid[axis], f64), inv_freq);  // [n_axis, pairs]
    std::vector<int64_t> view{1, 1, 1, pairs};
    view[axis] = grid[axis];
    parts.push_back(angles.view(view).expand({grid[0], grid[1], grid[2], pairs}));
  }
  auto angles = torch::cat(parts, 3).reshape({grid[0] * grid[1] * grid[2], head_dim / 2});  // [L, head_dim/2]
  return {torch::cos(angles).to(device, torch::kFloat32), torch::sin(angles).to(device, torch::kFloat32)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, double scale) {
  // One complex product per element, (re + i im)(cos + i sin) * scale: its
  // backward is one product with the conjugate, and nothing of x is saved.
  const auto sizes = x.sizes();  // [B, L, heads, head_dim]
  const auto pairs =
      torch::view_as_complex(x.to(torch::kFloat32).contiguous().view({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2}));
  const auto turn = torch::complex(table.cos * scale, table.sin * scale).unsqueeze(1);  // [L, 1, head_dim/2]
  return torch::view_as_real(pairs * turn).view(sizes);
}

}  // namespace wt::wan
