#include "wantrain/train/gradients.hpp"

#include <torch/torch.h>

#include <cmath>

namespace wt::train {

at::Tensor bucket_norms(const std::vector<at::Tensor>& buffers) {
  torch::NoGradGuard no_grad;
  if (buffers.empty()) return torch::zeros({0}, torch::kFloat64);
  std::vector<at::Tensor> norms;
  // One fused pass per bucket, accumulated in double: fp32 accumulation is
  // off by ~1e-5 relative over 1e5 elements, enough that slices of the same
  // gradients (ZeRO) would disagree with the whole.
  for (const auto& b : buffers) norms.push_back(at::linalg_vector_norm(b, 2, c10::nullopt, false, at::kDouble));
  return torch::stack(norms);
}

double norm_of(const double* norms, size_t count) {
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += norms[i] * norms[i];
  return std::sqrt(sum);
}

double global_norm(const std::vector<at::Tensor>& buffers) {
  const auto norms = bucket_norms(buffers).cpu();
  return norm_of(norms.data_ptr<double>(), size_t(norms.numel()));
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
