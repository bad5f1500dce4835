// The flow-matching (rectified flow) objective, as Wan trains:
//   sigma ~ uniform(0,1) or logit-normal(mean, std), then shifted
//   sigma' = s*sigma / (1 + (s-1)*sigma);  x_t = (1-sigma')*x0 + sigma'*eps;
//   timestep t = 1000*sigma';  target v = eps - x0;  loss = MSE in fp32.
// Each sample's sigma and eps come from a generator keyed by (seed, step,
// global sample index), so they do not depend on how samples are split over
// ranks, micro-batches or restarts.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace wt::wan {

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

// What noises a batch: each row's (already shifted) sigma, [B] fp32, and its
// noise eps, x0's shape in fp32, both on the CPU. A pure function of the
// keys, so it can be made ahead of the step on another thread.
struct Noise {
  at::Tensor sigmas;  // [B] fp32
  at::Tensor eps;     // [B, C, F, H, W] fp32
};

// Row i's eps drawn from a generator seeded by noise_keys[i]. Written into
// `into`'s CPU fp32 tensors of those shapes where defined, else new ones.
Noise noise_at(at::IntArrayRef x0_sizes, const std::vector<double>& sigmas, const std::vector<uint64_t>& noise_keys,
               Noise into = {});

// The training noise of samples `sample_indices` at `step`: sigma and eps
// keyed by (seed, step, index), into `into` as noise_at writes.
Noise training_noise(at::IntArrayRef x0_sizes, const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step,
                     const FlowMatchingOptions& options, Noise into = {});

// x0 [B, C, F, H, W] noised with `noise` (on any device: it is moved to
// x0's).
NoisyBatch apply_noise(const at::Tensor& x0, const Noise& noise);

// apply_noise(x0, noise_at(...)).
NoisyBatch noisy_batch_at(const at::Tensor& x0, const std::vector<double>& sigmas,
                          const std::vector<uint64_t>& noise_keys);

// x0 [B, C, F, H, W]; sample_indices[i] is the global dataset index of row
// i: apply_noise(x0, training_noise(...)).
NoisyBatch make_noisy_batch(const at::Tensor& x0, const std::vector<int64_t>& sample_indices, uint64_t seed,
                            int64_t step, const FlowMatchingOptions& options);

// Wan2.2 TI2V's first-frame condition (textimage2video.py): the first
// latent frame of the rows where `kept` [B] bool is true is the clean x0,
// its tokens see timestep 0, and it is left out of the loss; the other rows
// are text-to-video. patch: the model's (f, h, w) patch size.
struct FirstFrameBatch {
  at::Tensor x_t;        // [B, C, F, H, W]: x_t, the kept rows' frame 0 replaced by x0's
  at::Tensor timesteps;  // [B, L] fp32, one per token in (f, h, w) order: 0 on a kept frame 0
  at::Tensor kept;       // [B] bool, on x_t's device
};
FirstFrameBatch keep_first_frame(const NoisyBatch& noisy, const at::Tensor& x0, const std::vector<bool>& kept,
                                 const std::array<int64_t, 3>& patch);

// The per-token timesteps of a sampling step: t [B] for every token, 0 on
// the first latent frame's (frame 0 is the picture): [B, L] fp32.
at::Tensor first_frame_timesteps(const at::Tensor& t, at::IntArrayRef latent_sizes,
                                 const std::array<int64_t, 3>& patch);

// The flow-matching loss without the kept rows' frame 0: each row's mean
// over the elements it is trained on, then the mean over rows (with no row
// kept, flow_matching_loss up to the order of the sums).
at::Tensor first_frame_loss(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& kept);
// Each row's loss, [B] fp32 (what first_frame_loss averages).
at::Tensor first_frame_losses(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& kept);

// mean((prediction - target)^2) over every element, in fp32.
at::Tensor flow_matching_loss(const at::Tensor& prediction, const at::Tensor& target);
// The same per row: [B] fp32.
at::Tensor per_sample_loss(const at::Tensor& prediction, const at::Tensor& target);

}  // namespace wt::wan
