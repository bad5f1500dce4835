#include "wantrain/wan/model/patches.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include "wantrain/util/error.hpp"

namespace wt::wan {

std::array<int64_t, 3> token_grid(at::IntArrayRef sizes, Patch patch) {
  static constexpr const char* kAxis[] = {"frames", "height", "width"};
  std::array<int64_t, 3> grid{};
  for (size_t a = 0; a < 3; ++a) {
    const int64_t n = sizes[sizes.size() - 3 + a];
    if (n % patch[a] != 0 || n == 0)
      throw UsageError(
          fmt::format("latent {} {} is not a positive multiple of the model's patch size {}", kAxis[a], n, patch[a]));
    grid[a] = n / patch[a];
  }
  return grid;
}

at::Tensor patchify(const at::Tensor& x, Patch patch) {
  const auto grid = token_grid(x.sizes(), patch);
  const int64_t b = x.size(0), c = x.size(1);
  return x.view({b, c, grid[0], patch[0], grid[1], patch[1], grid[2], patch[2]})
      .permute({0, 2, 4, 6, 3, 5, 7, 1})  // [B, f, h, w, pf, ph, pw, C]
      .reshape({b, grid[0] * grid[1] * grid[2], -1});
}

at::Tensor unpatchify(const at::Tensor& tokens, std::array<int64_t, 3> grid, Patch patch, int64_t channels) {
  const int64_t b = tokens.size(0);
  return tokens.reshape({b, grid[0], grid[1], grid[2], patch[0], patch[1], patch[2], channels})
      .permute({0, 7, 1, 4, 2, 5, 3, 6})  // [B, C, f, pf, h, ph, w, pw]
      .reshape({b, channels, grid[0] * patch[0], grid[1] * patch[1], grid[2] * patch[2]});
}

}  // namespace wt::wan
