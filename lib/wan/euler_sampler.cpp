#include "wantrain/wan/euler_sampler.hpp"

#include <torch/torch.h>

#include "wantrain/wan/flow_matching.hpp"

namespace wt::wan {

std::vector<double> sampling_sigmas(int steps, double shift) {
  std::vector<double> sigmas(steps + 1);
  for (int i = 0; i <= steps; ++i) sigmas[i] = shift_sigma(1.0 - double(i) / steps, shift);
  return sigmas;
}

bool high_noise_step(double timestep, double boundary) { return timestep >= boundary * 1000.0; }

at::Tensor euler_sample(const at::Tensor& noise, const VelocityField& velocity, const EulerOptions& options,
                        const HighNoiseExpert* high_noise) {
  torch::NoGradGuard no_grad;
  const auto sigmas = sampling_sigmas(options.steps, options.shift);
  auto x = noise.to(torch::kFloat32);
  const bool first_frame = options.first_frame.defined();
  const auto first = first_frame ? options.first_frame.to(x.device(), torch::kFloat32) : at::Tensor();
  auto hold_first_frame = [&] {
    if (first_frame) x.slice(2, 0, 1).copy_(first);
  };
  hold_first_frame();
  for (int i = 0; i < options.steps; ++i) {
    const double timestep = 1000.0 * sigmas[i];
    const bool high = high_noise && high_noise_step(timestep, high_noise->boundary);
    const VelocityField& field = high ? high_noise->velocity : velocity;
    const double cfg = high ? high_noise->cfg : options.cfg;
    auto t = torch::full({x.size(0)}, timestep, x.options());
    if (first_frame) t = first_frame_timesteps(t, x.sizes(), options.patch);
    at::Tensor v;
    if (cfg == 0.0) {  // unconditional: one model call
      v = field(x, t, false).to(torch::kFloat32);
    } else {
      v = field(x, t, true).to(torch::kFloat32);
      if (cfg != 1.0) {
        auto v_uncond = field(x, t, false).to(torch::kFloat32);
        v = v_uncond + cfg * (v - v_uncond);
      }
    }
    x = x + (sigmas[i + 1] - sigmas[i]) * v;
    hold_first_frame();
  }
  return x;
}

}  // namespace wt::wan
