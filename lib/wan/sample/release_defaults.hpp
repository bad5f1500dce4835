// The sampling settings the official code uses for each released model
// (Wan2.1's generate.py and wan/configs, Wan2.2's wan/configs): steps,
// shift, guidance (two values for A14B, low-noise then high-noise), the
// expert boundary and the negative prompt (sample_neg_prompt). A model is
// taken for a release by its shape: width, depth, type and, for the
// image-to-video ones, whether it reads CLIP features (Wan2.1) or not
// (Wan2.2). A model of another shape was trained from scratch elsewhere
// (by wantrain) and has no release settings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct ReleaseSampling {
  std::string model;  // e.g. "Wan2.1 T2V-1.3B"
  int steps = 50;
  double shift = 5.0;
  double cfg_low = 5.0, cfg_high = 5.0;  // equal for one model
  double boundary = 0.0;                 // A14B's expert switch (timestep / 1000); 0: one model
  std::string negative_prompt;           // the release's sample_neg_prompt
  std::optional<Solver> solver;          // unset: wantrain's default (unipc, as Wan's generate.py)
};

// The release `config` is, for a video of `pixels` (Wan2.1 I2V samples
// 832x480 at shift 3); `two_experts`: Wan2.2 A14B's pair. nullopt: no
// release has this shape.
std::optional<ReleaseSampling> release_sampling(const WanConfig& config, bool two_experts, int64_t pixels);

// Wan2.2 A14B's expert boundary (timestep / 1000) for a model of `type`:
// 0.9 for image to video, 0.875 otherwise (its wan/configs).
double release_boundary(ModelType type);

// The unconditional branch of guidance for a prompt: the negative prompt
// given (`given`; its empty value: the all-zero context), else a released
// model's negative prompt (`release`, unless the weights are a wantrain
// checkpoint's), else the all-zero context that wantrain --text-drop trains.
// `negative_prompt` empty: the all-zero context; `why` says which, for the
// user.
struct UnconditionalBranch {
  std::string negative_prompt;
  std::string why;
};
UnconditionalBranch unconditional_branch(const std::optional<std::string>& given,
                                         const std::optional<ReleaseSampling>& release, bool wantrain_checkpoint);

}  // namespace wt::wan
