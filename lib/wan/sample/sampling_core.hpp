// The one sampling core: latents drawn from noise by a flow-matching model
// (or Wan2.2 A14B's two experts, each over its range of timesteps), with
// classifier-free guidance, under a condition. wansample (SamplingPipeline),
// the training sample (TrainingSampler), the prompt videos (PromptVideos)
// and the sample ranks (which call those two) all draw through it; they
// differ only in where the models, the condition, the sampler's settings
// and the noise come from, and in what they make of the latents.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/sample/model_velocity.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/sample/step_cache.hpp"

namespace wt::wan {

struct SampleModels {
  WanModelImpl* model = nullptr;  // the one model, or A14B's low-noise expert
  // A14B's high-noise expert (the steps at t >= boundary * 1000), with its
  // own guidance (unset: the sampler's cfg); model nullptr: none.
  HighNoiseModel high;
  std::optional<double> high_cfg;
  BranchPair pair;  // --cfg-parallel: the two branches of guidance on two halves of the ranks
  // Before each forward of a model (an offloaded expert brought to the device).
  std::function<void(WanModelImpl& model)> before;
  // Step caching (step_cache.hpp) instead of the sampler options' own: a
  // calibration's recorder, or one that counts over draws; nullptr: the
  // options' (none by default).
  StepCaching* caching = nullptr;
};

struct SampleCondition {
  at::Tensor context;      // [L, D]: the prompt's text embedding
  at::Tensor negative;     // [L, D]; undefined: the unconditional context caption dropout trains
  ModelCondition image;    // an image-to-video model's picture (both branches see it)
  at::Tensor first_frame;  // TI2V: [1, C, 1, H, W], held through sampling; undefined: none
};

// Latents [C, F, H, W] fp32 on the CPU, from `noise` [1, C, F, H, W] (on
// the models' device), without gradients and under autocast in
// `compute_dtype`; the condition's tensors are moved to the noise's device.
at::Tensor draw_latents(const SampleModels& models, const SampleCondition& condition, SamplerOptions sampler,
                        const at::Tensor& noise, at::ScalarType compute_dtype);

// The noise a sample starts from: standard normal fp32 from a CPU generator
// of its own seeded with `seed`, so that every draw of it is the same and no
// other random stream (training's) moves.
at::Tensor seeded_noise(at::IntArrayRef shape, uint64_t seed);

}  // namespace wt::wan
