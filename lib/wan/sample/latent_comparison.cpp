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

VideosComparison compare_with_videos(const at::Tensor& sample, const std::vector<at::Tensor>& videos) {
  VideosComparison c;
  c.nearest_correlation = -2;  // below any correlation
  for (std::size_t k = 0; k < videos.size(); ++k) {
    const double r = compare_latents(sample, videos[k]).correlation;
    if (r > c.nearest_correlation) {
      c.nearest_correlation = r;
      c.nearest = k;
    }
  }
  c.mean_correlation = compare_latents(sample, torch::stack(videos).to(torch::kFloat64).mean(0)).correlation;
  return c;
}

}  // namespace wt::wan
