#include "wantrain/train/gradients.hpp"

#include <torch/torch.h>

#include <cmath>

namespace wt::train {

double sum_of_squares(const std::vector<at::Tensor>& buffers) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const auto& b : buffers) {
    // One fused pass per bucket, accumulated in double: fp32 accumulation
    // is off by ~1e-5 relative over 1e5 elements, enough that slices of
    // the same gradients (ZeRO) would disagree with the whole.
    const double n = at::linalg_vector_norm(b, 2, c10::nullopt, false, at::kDouble).item<double>();
    sum += n * n;
  }
  return sum;
}

double global_norm(const std::vector<at::Tensor>& buffers) { return std::sqrt(sum_of_squares(buffers)); }

void scale_gradients(const std::vector<at::Tensor>& buffers, double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& b : buffers) b.mul_(factor);
}

void clip_to_norm(const std::vector<at::Tensor>& buffers, double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return;
  scale_gradients(buffers, max_norm / (norm + 1e-6));
}

}  // namespace wt::train
