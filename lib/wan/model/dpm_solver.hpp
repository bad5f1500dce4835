// DPM-Solver++ on a flow-matching model, as Wan's
// FlowDPMSolverMultistepScheduler samples (diffusers'
// DPMSolverMultistepScheduler, "dpmsolver++", order 2, "midpoint", for flow
// prediction): multistep on the data prediction m_i = x_i - sigma_i * v_i in
// the half-log-SNR lambda = log((1 - sigma) / sigma).
//
//   x_{i+1} = sigma_{i+1}/sigma_i x_i - alpha_{i+1} (e^-h - 1) (m_i + (m_i - m_{i-1}) / (2 r))
// with h = lambda_{i+1} - lambda_i and r = (lambda_i - lambda_{i-1}) / h;
// order 1 (no difference term) at the first step and at the last, which
// lands on m_{N-1}. Its schedule starts at sigma 1, where lambda = -inf, so
// the second step's difference term vanishes too (r = inf), as in the release.
#pragma once

#include "wantrain/wan/model/flow_solver.hpp"

namespace wt::wan {

class DpmSolver final : public FlowSolver {
 public:
  DpmSolver(int steps, double shift);
  at::Tensor step(int i, const at::Tensor& x, const at::Tensor& velocity) override;

 private:
  at::Tensor previous_;  // m_{i-1}
};

}  // namespace wt::wan
