#include "wantrain/wan/sample/sampler.hpp"

#include <torch/torch.h>

#include "wantrain/wan/model/flow_matching.hpp"

namespace wt::wan {

bool high_noise_step(double timestep, double boundary) { return timestep >= boundary * 1000.0; }

at::Tensor sample_flow(const at::Tensor& noise, const VelocityField& velocity, const SamplerOptions& options,
                       const HighNoiseExpert* high_noise) {
  torch::NoGradGuard no_grad;
  auto solver = make_flow_solver(options.solver, options.steps, options.shift, options.schedule);
  auto x = noise.to(torch::kFloat32);
  const bool first_frame = options.first_frame.defined();
  const auto first = first_frame ? options.first_frame.to(x.device(), torch::kFloat32) : at::Tensor();
  auto hold_first_frame = [&] {
    if (first_frame) x.slice(2, 0, 1).copy_(first);
  };
  hold_first_frame();
  for (int i = 0; i < solver->steps(); ++i) {
    const double timestep = solver->timestep(i);
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
    x = solver->step(i, x, v);
    hold_first_frame();
  }
  return x;
}

}  // namespace wt::wan
