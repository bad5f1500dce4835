// Samples drawn during training (wantrain --sample-every N): rank 0 draws
// one training sample's prompt with the current EMA weights (or the weights
// without an EMA) as wansample does — the solver's steps with classifier-free
// guidance from the same initial noise every time — and writes
// <output-dir>/samples/step-N.png, the sample above that training sample's
// own latents, with their correlation.
//
// Drawing leaves training exactly as it was: the noise comes from a
// generator of its own, the model is in eval mode with no autograd while it
// draws, and the EMA weights are swapped in by reference (Tensor::set_data,
// no copy) and the trained ones swapped back, each tensor its own again.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/sample/model_velocity.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/train/objective.hpp"
#include "wantrain/train/train_log.hpp"

namespace wt::wan {

struct TrainingSampleOptions {
  int64_t index = 0;  // the training sample whose prompt is drawn
  SamplerOptions sampler;
  uint64_t seed = 0;                          // of the initial noise, the same at every draw
  at::ScalarType compute_dtype = at::kFloat;  // autocast, as in training
  std::string directory;                      // <output-dir>/samples; empty: no PNG (a rank that helps draw)
  // A first-frame (TI2V) run: the sample starts from its own first latent
  // frame, as wansample --image does (when it has more than one).
  bool first_frame = false;
};

class TrainingSampler {
 public:
  // Reads the sample's latents and text embedding (UsageError naming
  // sample_index when `dataset` has no such sample).
  TrainingSampler(const data::Dataset& dataset, const TrainingSampleOptions& options);

  // Draws with `model`, whose `trainable` parameters take `weights` (by
  // position, the same shapes) while it draws; empty `weights`: as they are.
  // Writes the PNG and returns what the log records. `high`: Wan2.2 A14B's
  // high-noise expert, which takes the steps at or above its boundary.
  train::SampleReport draw(WanModelImpl& model, const train::NamedTensors& trainable,
                           const train::NamedTensors& weights, int64_t step,
                           const HighNoiseModel* high = nullptr) const;

 private:
  TrainingSampleOptions options_;
  at::Tensor latents_, context_;  // [C, F, H, W] and [L, D], fp32 on the CPU
  ModelCondition image_;          // an image-to-video sample's y and CLIP features, [1, ...] fp32
};

}  // namespace wt::wan
