// The guided sampling loop of a flow-matching model, as Wan's samplers run
// it: from pure noise, at each of the solver's steps the model's velocity
// with classifier-free guidance v = v_uncond + cfg * (v_cond - v_uncond),
// then the solver's step (flow_solver.hpp: euler, unipc, dpm++).
//
// Wan2.2 adds two things. TI2V-5B from a picture (textimage2video.py): the
// first latent frame is the picture's latents before every step and after
// each, and its tokens see timestep 0. A14B's two experts (text2video.py,
// image2video.py): the steps whose timestep is at or above boundary * 1000
// run the high-noise expert with its own guidance scale, the rest the
// low-noise one; one solver runs through both.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>

#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/sample/step_cache.hpp"

namespace wt::wan {

struct SamplerOptions {
  Solver solver = Solver::UniPC;
  Schedule schedule = Schedule::Release;  // UniPC's sigmas: the release's or diffusers'
  int steps = 50;
  double shift = 5.0;
  double cfg = 5.0;  // 1: no guidance, 0: unconditional (one model call per step each)
  // TI2V: the first frame's latents [B, C, 1, H, W], held through sampling;
  // the velocity field then gets per-token timesteps [B, L] (0 on frame 0)
  // for a model of this patch size. Undefined: no first frame.
  at::Tensor first_frame;
  std::array<int64_t, 3> patch{1, 2, 2};
  // Step caching (step_cache.hpp) of each draw through the sampling core
  // (sample_flow itself caches nothing): the settings, and the calibrations
  // of the model and of A14B's high-noise expert where the method needs them.
  StepCacheSettings cache;
  std::shared_ptr<const CacheCalibration> cache_calibration, high_cache_calibration;
};

// The model's velocity at x [B, ...] for timesteps t [B] (or [B, L] with a
// first frame); `conditional` false asks for the unconditional
// (empty-context) prediction.
using VelocityField = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t, bool conditional)>;

// Wan2.2 A14B's high-noise expert: it takes the steps at t >= boundary * 1000
// (boundary in (0, 1]; the release: 0.875 text to video, 0.9 image to video)
// with guidance `cfg`; the other steps go to sample_flow's `velocity`.
struct HighNoiseExpert {
  VelocityField velocity;
  double cfg = 5.0;
  double boundary = 0.875;
};
// Whether the step at timestep t (0..1000) is the high-noise expert's.
bool high_noise_step(double timestep, double boundary);

// Integrates from pure noise (sigma = 1) to data (sigma = 0); returns fp32.
at::Tensor sample_flow(const at::Tensor& noise, const VelocityField& velocity, const SamplerOptions& options,
                       const HighNoiseExpert* high_noise = nullptr);

}  // namespace wt::wan
