// UniPC on a flow-matching model, as Wan's FlowUniPCMultistepScheduler
// samples (diffusers' UniPCMultistepScheduler for flow prediction): the
// predictor UniP and the corrector UniC of Zhao et al. 2023 on the data
// prediction m_i = x_i - sigma_i * v_i, with B(h) = e^h - 1 ("bh2"), in the
// half-log-SNR lambda = log((1 - sigma) / sigma).
//
// Step i first corrects x_i with m_i (UniC of the order step i-1 used), then
// predicts x_{i+1} (UniP). The order is 2 once two predictions exist, and 1
// at the last step (lower_order_final); the last step lands on m_{N-1}.
#pragma once

#include <deque>

#include "wantrain/wan/model/flow_solver.hpp"

namespace wt::wan {

class UniPCSolver final : public FlowSolver {
 public:
  static constexpr int kOrder = 2;
  // On `schedule` (flow_solver.hpp: the release's, or diffusers').
  explicit UniPCSolver(SolverSchedule schedule);
  // The release's schedule of `steps` steps at `shift`.
  static SolverSchedule release(int steps, double shift);
  at::Tensor step(int i, const at::Tensor& x, const at::Tensor& velocity) override;

 private:
  // x_t from x_s (sigma index s to t) with m0 = data_.back(), the prediction
  // at s, and the differences of the `order - 1` before it; UniC (the
  // corrector) passes the newest prediction, at t, as `newest`.
  at::Tensor update(int s, int t, const at::Tensor& x, int order, const at::Tensor* newest) const;

  std::deque<at::Tensor> data_;  // m of the last kOrder steps, oldest first
  at::Tensor last_sample_;       // x_{i-1} after its correction
  int last_order_ = 0, lower_order_steps_ = 0;
};

}  // namespace wt::wan
