// Few-step distillation by phased consistency along the teacher's guided
// probability-flow ODE: the math, apart from any model (the objective that
// runs it on WanModels is wan/objective/few_step_objective.hpp).
//
// The method: Phased Consistency Models (F.-Y. Wang et al., NeurIPS 2024,
// arXiv:2405.18407), that is consistency distillation (Y. Song et al. 2023,
// "Consistency Models", eq. 7) with the trajectory cut into K phases, each
// mapped to its lower edge, so that a K-step sampler lands on the edges.
// The target network is the student itself without gradient (θ⁻ =
// stopgrad(θ), "Improved Techniques for Training Consistency Models", Song
// and Dhariwal 2023, §3.2), so no EMA copy is held. In the flow
// parametrisation of Wan (x_t = (1 - t) x0 + t eps, v = eps - x0):
//
//   grid   sigma_0 = 1 > ... > sigma_N = 0: Euler's grid of N steps at the
//          run's shift (sampling_sigmas). The student's K steps take every
//          m = N/K-th point, so its phase edges are Euler's grid of K
//          steps at the same shift: the student samples with
//          `--solver euler --steps K --cfg 1`.
//   draw   a grid point n in [0, N) per sample: t = sigma_n,
//          t' = sigma_{n+1}, s = the phase edge at or below t'.
//   teacher  v_g = v_u + G (v_c - v_u) at (x_t, t), no gradient
//   step   x_t' = x_t + (t' - t) v_g                     (one Euler step)
//   target x_s = x_t' + (s - t') v_θ⁻(x_t', t')          (= x_t' when t' = s)
//          v* = (x_s - x_t) / (s - t)
//             = ((t' - t) v_g + (s - t') v_θ⁻) / (s - t)   (computed so)
//   loss   mean (v_θ(x_t, t) - v*)^2 in fp32
//
// The student's phase map f_θ(x, t) = x + (s - t) v_θ(x, t) is one Euler
// step to the edge, so the loss is PCM's |f_θ(x_t, t) - f_θ⁻(x_t', t')|^2
// weighted by 1 / (s - t)^2: on the scale of a velocity, as the
// flow-matching loss. With m = 1 (K = N) every step ends on an edge and v*
// is the guided teacher's velocity itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace wt::wan {

struct FewStepSchedule {
  int steps = 4;           // K, the student's sampling steps
  int teacher_steps = 48;  // N, a multiple of K
  double shift = 5.0;
  std::vector<double> grid;  // sigma_0 = 1 .. sigma_N = 0
  // The index of the phase edge at or below grid point n + 1.
  int edge_index(int n) const;
  // The student's K + 1 sigmas: the edges, from 1 down to 0.
  std::vector<double> student_sigmas() const;
};

// std::invalid_argument unless 1 <= steps <= teacher_steps, teacher_steps a
// multiple of steps, and shift > 0.
FewStepSchedule few_step_schedule(int steps, int teacher_steps, double shift);

// Each sample's grid point n in [0, N), keyed by (seed, step, global index)
// apart from its noise: the same draw on any rank, micro-batch or restart.
std::vector<int> consistency_points(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step,
                                    const FewStepSchedule& schedule);

// The sigmas of the drawn points, [B] fp32 each, on `device`.
struct ConsistencySigmas {
  at::Tensor t, next, edge;
};
ConsistencySigmas consistency_sigmas(const FewStepSchedule& schedule, const std::vector<int>& points,
                                     const at::Device& device);

// x [B, ...] and each row's sigma [B] -> the velocity [B, ...] fp32.
using SigmaVelocity = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& sigma)>;

// Each row's value [B] as fp32 on x's device, shaped to broadcast over x [B, ...].
at::Tensor per_row(const at::Tensor& value, const at::Tensor& x);

// (1 - t) x0 + t eps, each row at its own t [B].
at::Tensor noised_at(const at::Tensor& x0, const at::Tensor& eps, const at::Tensor& t);

// v* above, fp32 and without autograd: `guided_teacher` is v_g, `target`
// the student without gradient (v_θ⁻).
at::Tensor consistency_target(const at::Tensor& x_t, const ConsistencySigmas& sigmas,
                              const SigmaVelocity& guided_teacher, const SigmaVelocity& target);

}  // namespace wt::wan
