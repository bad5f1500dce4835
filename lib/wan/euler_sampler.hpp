// Euler sampling of a flow-matching model, as Wan's sampler steps: sigmas
// shifted from linspace(1, 0, N+1); x <- x + (sigma_{i+1} - sigma_i) * v(x, 1000*sigma_i),
// with classifier-free guidance v = v_uncond + cfg * (v_cond - v_uncond).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace wt::wan {

struct EulerOptions {
  int steps = 50;
  double shift = 5.0;
  double cfg = 5.0;  // 1: no guidance, 0: unconditional (one model call per step each)
};

// The N+1 sigmas, from 1 down to 0.
std::vector<double> sampling_sigmas(int steps, double shift);

// The model's velocity at x [B, ...] for timesteps t [B]; `conditional`
// false asks for the unconditional (empty-context) prediction.
using VelocityField = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t, bool conditional)>;

// Integrates from pure noise (sigma = 1) to data (sigma = 0); returns fp32.
at::Tensor euler_sample(const at::Tensor& noise, const VelocityField& velocity, const EulerOptions& options);

}  // namespace wt::wan
