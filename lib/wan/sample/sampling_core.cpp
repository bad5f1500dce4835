#include "wantrain/wan/sample/sampling_core.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "wantrain/nn/autocast.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"

namespace wt::wan {

at::Tensor draw_latents(const SampleModels& models, const SampleCondition& condition, SamplerOptions sampler,
                        const at::Tensor& noise, at::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  const auto device = noise.device();
  const auto cond = condition.context.unsqueeze(0).to(device);  // [1, L, D]
  const auto uncond =
      condition.negative.defined() ? condition.negative.unsqueeze(0).to(device) : unconditional_context(cond);
  ModelCondition image;
  if (condition.image.y.defined()) image.y = condition.image.y.to(device);
  if (condition.image.clip_fea.defined()) image.clip_fea = condition.image.clip_fea.to(device);
  if (condition.image.vace_context.defined()) image.vace_context = condition.image.vace_context.to(device);
  if (condition.image.full_ref.defined()) image.full_ref = condition.image.full_ref.to(device);
  image.vace_scale = condition.image.vace_scale;
  // The caller's step caching, else the sampler's settings' own for this draw.
  StepCaching* caching = models.caching;
  std::unique_ptr<StepCaching> own;
  if (!caching && sampler.cache.method != CacheMethod::None) {
    own = std::make_unique<StepCaching>(sampler.cache, sampler.cache_calibration, sampler.high_cache_calibration);
    caching = own.get();
  }
  auto velocity_of = [&](WanModelImpl& model, bool is_high) {
    std::function<void()> before;
    if (models.before) before = [&models, &model] { models.before(model); };
    return model_velocity(model, cond, uncond, image, models.pair, before, caching, is_high);
  };
  if (caching) {
    // The steps each expert takes, so that each model's caches count them.
    const auto solver = make_flow_solver(sampler.solver, sampler.steps, sampler.shift, sampler.schedule);
    int high_steps = 0;
    for (int i = 0; models.high.model && i < solver->steps(); ++i)
      high_steps += high_noise_step(solver->timestep(i), models.high.boundary) ? 1 : 0;
    caching->begin_draw(solver->steps(), high_steps);
  }
  const VelocityField velocity = velocity_of(*models.model, false);
  std::optional<HighNoiseExpert> high;
  if (models.high.model)
    high = HighNoiseExpert{velocity_of(*models.high.model, true), models.high_cfg.value_or(sampler.cfg),
                           models.high.boundary};
  if (condition.first_frame.defined()) {
    sampler.first_frame = condition.first_frame.to(device, torch::kFloat32);
    sampler.patch = models.model->config().patch_size;
  }
  const nn::AutocastScope autocast(compute_dtype, device.type());
  return sample_flow(noise, velocity, sampler, high ? &*high : nullptr)[0].to(torch::kCPU);  // [C, F, H, W]
}

at::Tensor seeded_noise(at::IntArrayRef shape, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, generator, torch::kFloat32);
}

}  // namespace wt::wan
