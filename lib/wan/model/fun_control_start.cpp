#include "wantrain/wan/model/fun_control_start.hpp"

#include <torch/torch.h>

namespace wt::wan {

std::vector<bool> start_given(const at::Tensor& y, int64_t out_dim) {
  TORCH_CHECK(y.dim() == 5 && y.size(1) == 2 * out_dim + 4, "start_given: y is [B, 2 z + 4, F, H, W]");
  // The mask's first channel on latent frame 0: 1 wherever the start is kept.
  const auto kept = (y.select(1, out_dim).select(1, 0).flatten(1).amin(1) > 0.5).to(torch::kCPU);  // [B]
  std::vector<bool> out(size_t(y.size(0)));
  for (int64_t i = 0; i < y.size(0); ++i) out[size_t(i)] = kept[i].item<bool>();
  return out;
}

at::Tensor start_latents(const at::Tensor& y, int64_t out_dim) {
  TORCH_CHECK(y.dim() == 5 && y.size(1) == 2 * out_dim + 4, "start_latents: y is [B, 2 z + 4, F, H, W]");
  return y.narrow(1, out_dim + 4, out_dim).narrow(2, 0, 1);
}

}  // namespace wt::wan
