// The velocity the sampler asks of a WanModel for each branch of guidance
// (sample/sampler.hpp's VelocityField): the prompt's context or the
// unconditional one, with the picture's condition in both (Wan's
// image2video.py guides on the text only).
//
// With --cfg-parallel the ranks form two halves, rank r of one paired with
// rank r of the other (`pair`: that Comm of two; `branch` 0 for the
// conditional half, 1 for the unconditional). The sampler asks for the
// conditional branch, then the unconditional one: at the first call each
// half computes its own and the pair trade them (an all-gather of two), and
// the second call returns the other half's.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/sample/step_cache.hpp"

namespace wt::wan {

struct BranchPair {
  distributed::Comm* comm = nullptr;  // nullptr: this rank computes both branches
  int branch = 0;
};

// `before`, when given, runs before each forward (an offloaded expert
// brought to the device).
// Wan2.2 A14B's high-noise expert beside the model that takes the other
// steps (sampler.hpp's HighNoiseExpert, as a model).
struct HighNoiseModel {
  WanModelImpl* model = nullptr;
  double boundary = 0.875;
};

// `caching`, when given, gives each branch's forwards its step cache
// (step_cache.hpp): the high-noise expert's when `high`.
VelocityField model_velocity(WanModelImpl& model, at::Tensor cond, at::Tensor uncond, ModelCondition image,
                             BranchPair pair = {}, std::function<void()> before = {}, StepCaching* caching = nullptr,
                             bool high = false);

}  // namespace wt::wan
