// How close sampled latents are to a dataset sample's own: what wansample
// --compare prints and what samples drawn during training log.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace wt::wan {

struct LatentComparison {
  double correlation = 0;  // Pearson, over every element
  double mse = 0;
  double reference_variance = 0;  // the MSE of predicting the reference's mean everywhere
};

// `sample` and `reference` of the same shape, any float dtype or device.
LatentComparison compare_latents(const at::Tensor& sample, const at::Tensor& reference);

// A sample against the several videos of its prompt (a dataset where one
// prompt has many, as `wandata synth --modes K` makes): the correlation
// with the nearest of them, and with their mean, which a sampler drawing
// the blurred mean of a prompt's videos comes close to.
struct VideosComparison {
  std::size_t nearest = 0;         // which of `videos`
  double nearest_correlation = 0;  // the highest correlation with one of them
  double mean_correlation = 0;     // the correlation with their element-wise mean
};
// `videos` not empty, each of the sample's shape.
VideosComparison compare_with_videos(const at::Tensor& sample, const std::vector<at::Tensor>& videos);

}  // namespace wt::wan
