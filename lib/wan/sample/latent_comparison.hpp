// How close sampled latents are to a dataset sample's own: what wansample
// --compare prints and what samples drawn during training log.
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::wan {

struct LatentComparison {
  double correlation = 0;  // Pearson, over every element
  double mse = 0;
  double reference_variance = 0;  // the MSE of predicting the reference's mean everywhere
};

// `sample` and `reference` of the same shape, any float dtype or device.
LatentComparison compare_latents(const at::Tensor& sample, const at::Tensor& reference);

}  // namespace wt::wan
