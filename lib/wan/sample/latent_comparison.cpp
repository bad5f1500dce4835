#include "wantrain/wan/sample/latent_comparison.hpp"

#include <torch/torch.h>

namespace wt::wan {

LatentComparison compare_latents(const at::Tensor& sample, const at::Tensor& reference) {
  const auto a = sample.to(torch::kFloat64).flatten(), b = reference.to(torch::kFloat64).flatten();
  const auto da = a - a.mean(), db = b - b.mean();
  LatentComparison c;
  c.mse = (a - b).square().mean().item<double>();
  c.reference_variance = db.square().mean().item<double>();
  const double norms = (da.square().sum() * db.square().sum()).sqrt().item<double>();
  c.correlation = norms > 0 ? (da * db).sum().item<double>() / norms : 0.0;
  return c;
}

}  // namespace wt::wan
