// Euler sampling of a flow-matching model, as Wan's sampler steps: sigmas
// shifted from linspace(1, 0, N+1); x <- x + (sigma_{i+1} - sigma_i) * v(x, 1000*sigma_i),
// with classifier-free guidance v = v_uncond + cfg * (v_cond - v_uncond).
//
// Wan2.2 adds two things. TI2V-5B from a picture (textimage2video.py): the
// first latent frame is the picture's latents before every step and after
// the last, and its tokens see timestep 0. A14B's two experts (text2video.py,
// image2video.py): the steps whose timestep is at or above boundary * 1000
// run the high-noise expert with its own guidance scale, the rest the
// low-noise one.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace wt::wan {

struct EulerOptions {
  int steps = 50;
  double shift = 5.0;
  double cfg = 5.0;  // 1: no guidance, 0: unconditional (one model call per step each)
  // TI2V: the first frame's latents [B, C, 1, H, W], held through sampling;
  // the velocity field then gets per-token timesteps [B, L] (0 on frame 0)
  // for a model of this patch size. Undefined: no first frame.
  at::Tensor first_frame;
  std::array<int64_t, 3> patch{1, 2, 2};
};

// The N+1 sigmas, from 1 down to 0.
std::vector<double> sampling_sigmas(int steps, double shift);

// The model's velocity at x [B, ...] for timesteps t [B] (or [B, L] with a
// first frame); `conditional` false asks for the unconditional
// (empty-context) prediction.
using VelocityField = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t, bool conditional)>;

// Wan2.2 A14B's high-noise expert: it takes the steps at t >= boundary * 1000
// (boundary in (0, 1]; the release: 0.875 text to video, 0.9 image to video)
// with guidance `cfg`; the other steps go to euler_sample's `velocity`.
struct HighNoiseExpert {
  VelocityField velocity;
  double cfg = 5.0;
  double boundary = 0.875;
};
// Whether the step at timestep t (0..1000) is the high-noise expert's.
bool high_noise_step(double timestep, double boundary);

// Integrates from pure noise (sigma = 1) to data (sigma = 0); returns fp32.
at::Tensor euler_sample(const at::Tensor& noise, const VelocityField& velocity, const EulerOptions& options,
                        const HighNoiseExpert* high_noise = nullptr);

}  // namespace wt::wan
