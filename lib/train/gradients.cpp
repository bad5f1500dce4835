#include "wantrain/train/gradients.hpp"

#include <torch/torch.h>

#include <cmath>

namespace wt::train {

double global_norm(const std::vector<at::Tensor>& buffers) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const auto& b : buffers) {
    const double n = b.norm().item<double>();  // one fused pass per bucket
    sum += n * n;
  }
  return std::sqrt(sum);
}

void scale_gradients(const std::vector<at::Tensor>& buffers, double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& b : buffers) b.mul_(factor);
}

void clip_to_norm(const std::vector<at::Tensor>& buffers, double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return;
  scale_gradients(buffers, max_norm / (norm + 1e-6));
}

}  // namespace wt::train
