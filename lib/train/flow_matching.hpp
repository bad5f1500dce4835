// The flow-matching (rectified flow) objective, as Wan trains:
//   sigma ~ uniform(0,1) or logit-normal(mean, std), then shifted
//   sigma' = s*sigma / (1 + (s-1)*sigma);  x_t = (1-sigma')*x0 + sigma'*eps;
//   timestep t = 1000*sigma';  target v = eps - x0;  loss = MSE in fp32.
// Each sample's sigma and eps come from a generator keyed by (seed, step,
// global sample index), so they do not depend on how samples are split over
// ranks, micro-batches or restarts.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::train {

enum class TimestepSampling { Uniform, LogitNormal };

struct FlowMatchingOptions {
  TimestepSampling sampling = TimestepSampling::Uniform;
  double logit_mean = 0.0, logit_std = 1.0;
  double shift = 5.0;
  // The range of sigma after the shift (timesteps / 1000), for fine-tuning
  // one expert of Wan2.2 (its high-noise expert: [0.875, 1]). The shifted
  // sigma s is mapped to min + (max - min) * s, as min/max timestep options
  // of other Wan trainers do.
  double sigma_min = 0.0, sigma_max = 1.0;
  bool full_range() const { return sigma_min == 0.0 && sigma_max == 1.0; }
};

// s*sigma / (1 + (s-1)*sigma): s > 1 spends more steps at high noise.
double shift_sigma(double sigma, double shift);

// A drawn sigma in [0, 1] through the shift and into the options' range.
double training_sigma(double sigma, const FlowMatchingOptions& options);

struct NoisyBatch {
  at::Tensor x_t;        // [B, C, F, H, W], x0's dtype and device
  at::Tensor timesteps;  // [B] fp32, 1000 * sigma'
  at::Tensor sigmas;     // [B] fp32, sigma'
  at::Tensor target;     // [B, C, F, H, W] fp32, eps - x0
};

// A generator seed from (seed, step, global sample index): portable.
uint64_t sample_key(uint64_t seed, int64_t step, int64_t index);

// x0 [B, C, F, H, W] noised to the given (already shifted) sigma per row,
// with row i's noise drawn from a generator seeded by noise_keys[i].
NoisyBatch noisy_batch_at(const at::Tensor& x0, const std::vector<double>& sigmas,
                          const std::vector<uint64_t>& noise_keys);

// x0 [B, C, F, H, W]; sample_indices[i] is the global dataset index of row i.
NoisyBatch make_noisy_batch(const at::Tensor& x0, const std::vector<int64_t>& sample_indices, uint64_t seed,
                            int64_t step, const FlowMatchingOptions& options);

// mean((prediction - target)^2) over every element, in fp32.
at::Tensor flow_matching_loss(const at::Tensor& prediction, const at::Tensor& target);
// The same per row: [B] fp32.
at::Tensor per_sample_loss(const at::Tensor& prediction, const at::Tensor& target);

}  // namespace wt::train
