// A trained group: parameters an Objective trains together, with their own
// clipping, EMA, optimizer settings and checkpoint name. One model is one
// group; a second model trained beside it (distribution matching's fake
// score) is a group of its own, so that the Engine clips it alone, keeps no
// EMA of it, and never hands it to a sampler or a weights file, whatever
// its parameters are called.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wt::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999;
  double weight_decay = 0.01;
  double eps = 1e-8;
};

struct ParameterGroup {
  // In logs, metrics (grad_norm_<name> beside the first group's grad_norm)
  // and the checkpoint's record of its groups.
  std::string name = "model";
  // Its tensors' names in checkpoints are this prefix and the parameter's
  // own name, so that two models' parameters never share one ("" for the
  // model a run trains, whose checkpoints keep the names they always had).
  std::string checkpoint_prefix;
  NamedTensors parameters;  // by the module's own names, in registration order
  // Global-norm clipping of this group's gradient alone; unset: the run's
  // (EngineOptions::clip); 0: off.
  std::optional<double> clip;
  bool ema = true;      // averaged when the run keeps an EMA
  bool weights = true;  // the model the run trains: weights files and samplers; false: training state only
  double lr_scale = 1;  // its learning rate: the run's schedule times this
  std::optional<AdamWOptions> adamw;  // unset: the run's
  // ZeRO-3: the unit (nn/parameter_units.hpp) of a parameter, by the
  // module's own name; unset: nn::parameter_unit. A model whose forward runs
  // parameters registered elsewhere inside a block's window (a VACE block
  // beside the base block it follows) names that block's unit for them.
  std::function<std::string(const std::string& name)> unit_of;
};

// The groups' parameters under their checkpoint names, in group order.
NamedTensors checkpoint_tensors(const std::vector<ParameterGroup>& groups);
// The same for the groups an EMA averages (ParameterGroup::ema).
NamedTensors averaged_tensors(const std::vector<ParameterGroup>& groups);

}  // namespace wt::train
