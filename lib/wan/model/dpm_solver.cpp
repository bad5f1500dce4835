#include "wantrain/wan/model/dpm_solver.hpp"

#include <torch/torch.h>

#include <cmath>

namespace wt::wan {

DpmSolver::DpmSolver(int steps, double shift) : FlowSolver({}, {}) {
  auto schedule = release_schedule(1.0, steps, shift);
  sigmas_ = std::move(schedule.sigmas);
  timesteps_ = std::move(schedule.timesteps);
}

at::Tensor DpmSolver::step(int i, const at::Tensor& x, const at::Tensor& velocity) {
  torch::NoGradGuard no_grad;
  const double sigma_s = sigmas_[i], sigma_t = sigmas_[i + 1], alpha_t = 1.0 - sigma_t;
  const auto m = x - sigma_s * velocity;
  const double lambda_s = half_log_snr(sigma_s);
  const double h = half_log_snr(sigma_t) - lambda_s;
  const double decay = alpha_t * (std::exp(-h) - 1.0);
  auto next = (sigma_t / sigma_s) * x - decay * m;
  const bool first_order = !previous_.defined() || i == steps() - 1;
  if (!first_order) {
    const double r = (lambda_s - half_log_snr(sigmas_[i - 1])) / h;
    const double weight = 0.5 * decay / r;  // 0 when sigma_{i-1} = 1 (r = inf)
    if (weight != 0.0) next = next - weight * (m - previous_);
  }
  previous_ = m;
  return next;
}

}  // namespace wt::wan
