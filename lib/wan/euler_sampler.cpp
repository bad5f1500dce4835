#include "wantrain/wan/euler_sampler.hpp"

#include <torch/torch.h>

#include "wantrain/wan/flow_matching.hpp"

namespace wt::wan {

std::vector<double> sampling_sigmas(int steps, double shift) {
  std::vector<double> sigmas(steps + 1);
  for (int i = 0; i <= steps; ++i) sigmas[i] = shift_sigma(1.0 - double(i) / steps, shift);
  return sigmas;
}

at::Tensor euler_sample(const at::Tensor& noise, const VelocityField& velocity, const EulerOptions& options) {
  torch::NoGradGuard no_grad;
  const auto sigmas = sampling_sigmas(options.steps, options.shift);
  auto x = noise.to(torch::kFloat32);
  for (int i = 0; i < options.steps; ++i) {
    auto t = torch::full({x.size(0)}, 1000.0 * sigmas[i], x.options());
    if (options.cfg == 0.0) {  // unconditional: one model call
      x = x + (sigmas[i + 1] - sigmas[i]) * velocity(x, t, false).to(torch::kFloat32);
      continue;
    }
    auto v = velocity(x, t, true).to(torch::kFloat32);
    if (options.cfg != 1.0) {
      auto v_uncond = velocity(x, t, false).to(torch::kFloat32);
      v = v_uncond + options.cfg * (v - v_uncond);
    }
    x = x + (sigmas[i + 1] - sigmas[i]) * v;
  }
  return x;
}

}  // namespace wt::wan
