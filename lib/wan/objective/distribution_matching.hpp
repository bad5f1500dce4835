// Few-step distillation by distribution matching: the math, apart from any
// model (the objective that runs it on WanModels is
// wan/objective/few_step_objective.hpp).
//
// The method: Distribution Matching Distillation (T. Yin, M. Gharbi, R.
// Zhang, E. Shechtman, F. Durand, W. T. Freeman, T. Park, "One-step
// Diffusion with Distribution Matching Distillation", CVPR 2024, eqs. 2, 7
// and 8), with the multi-step generator and its backward simulation of
// DMD2 (T. Yin et al., "Improved Distribution Matching Distillation for
// Fast Image Synthesis", NeurIPS 2024, §4.5) and without its GAN term. The
// student (the generator G) samples in K Euler steps; a second trained
// model, the fake score, follows the distribution of G's samples by flow
// matching; the gradient that moves G's samples is the difference of the
// fake and the real (the guided teacher's) denoised estimates, so that G's
// samples move towards where the teacher puts its videos and away from
// where G puts its own. In Wan's flow parametrisation (x_t = (1 - t) x0 +
// t eps, v = eps - x0, the denoised estimate x0 = x_t - t v):
//
//   edges    sigma_0 = 1 > ... > sigma_K = 0: the student's Euler steps
//   draw     per sample, keyed: its step k in [0, K); t and t_f in (0, 1)
//            through the run's shift; noises eps_t, eps_f
//   generator  x_0 = eps; x_{j+1} = x_j + (sigma_{j+1} - sigma_j) v_G(x_j)
//            for j < k without gradient (the student's own sampler), then
//            x̂ = x_k - sigma_k v_G(x_k, sigma_k), with gradient
//   real     v_g = v_u + G (v_c - v_u) at (x_t, t), x_t = (1 - t) sg(x̂) + t eps_t
//   fake     v_f at (x_t, t), the fake score without gradient
//   move     g = ((x_t - t v_f) - (x_t - t v_g)) / mean|sg(x̂) - (x_t - t v_g)|
//            (DMD's eq. 8 normaliser, per sample)
//   loss_G   1/2 mean (x̂ - sg(x̂ - g))^2      its gradient in x̂ is g / n
//   loss_f   mean (v_f(x_f, t_f) - (eps_f - sg(x̂)))^2, x_f = (1 - t_f) sg(x̂) + t_f eps_f
//   regression  ODE: x_0 = eps; M guided Euler steps of the teacher down its
//            grid (the run's shift) give y, the teacher's own sample from
//            the student's noise
//            loss_r = lambda mean (x̂ - y)^2                (DMD's eq. 9)
//
// The losses are summed and both models step together (DMD's rule; the
// fake score's gradient never reaches the student and G's never the fake
// score, each loss being the other's constant). Distribution matching
// alone seeks modes: from a start that draws the blurred mean of a
// prompt's videos, every sample of a prompt moves to the same video. DMD's
// regression term keeps each noise on the video the teacher draws from
// it; DMD2 drops it for a two-time-scale update and a GAN, which did not
// keep them apart here (docs/distillation.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "wantrain/wan/objective/phased_consistency.hpp"

namespace wt::wan {

// Each sample's draws for one step, keyed by (seed, step, global index)
// apart from its training noise: the same on any rank, micro-batch or restart.
struct MatchingDraws {
  std::vector<int> generator_steps;  // k in [0, K)
  std::vector<double> matching_sigmas, fake_sigmas;
  std::vector<uint64_t> matching_noise_keys, fake_noise_keys;
};
// t = shift(0.02 + 0.96 u) (DMD's range of timesteps, 0.02 T to 0.98 T), t_f = shift(u'), u, u' uniform.
MatchingDraws matching_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, int steps,
                             double shift);

// The generator's sample x̂ [B, ...] fp32: `student_without_gradient` takes
// each row's first k_i Euler steps down `edges` from `start` (the noise;
// with a conditioning first frame, that frame clean, which a velocity held
// at 0 there keeps), then `student` (with gradient) gives the velocity
// whose denoised estimate is x̂. The steps are batched: as many calls of
// `student_without_gradient` as the deepest row needs, or with
// `full_depth` as the deepest any row could (K - 1, `edges` holding K + 1):
// rows past their own k stay where they are, so the result is the same,
// and every rank calls the student alike (ZeRO-3 gathers its units
// collectively at each call).
at::Tensor generator_sample(const at::Tensor& start, const std::vector<int>& generator_steps,
                            const std::vector<double>& edges, const SigmaVelocity& student_without_gradient,
                            const SigmaVelocity& student, bool full_depth = false);

// g above [B, ...] fp32, without autograd, for the sample `generated`
// (detached) noised to `noised` at `sigma` [B]; `moving` (or undefined) [B,
// 1, F, 1, 1] masks out what the normaliser must not average (a kept
// first frame).
at::Tensor matching_direction(const at::Tensor& generated, const at::Tensor& noised, const at::Tensor& sigma,
                              const SigmaVelocity& guided_teacher, const SigmaVelocity& fake_score,
                              const at::Tensor& moving = {});

// loss_G per row [B]: 1/2 mean over its elements of (x̂ - sg(x̂ - g))^2.
at::Tensor generator_losses(const at::Tensor& generated, const at::Tensor& direction);

// y above [B, ...] fp32, without autograd: Euler's steps of `guided_teacher`
// down `grid` (sigma 1 to 0) from `start`.
at::Tensor teacher_sample(const at::Tensor& start, const std::vector<double>& grid,
                          const SigmaVelocity& guided_teacher);

}  // namespace wt::wan
