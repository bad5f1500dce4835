// Exponential moving average of the weights, kept in fp32 beside them:
// after each optimizer step, ema <- decay * ema + (1 - decay) * weight.
// Skipped steps do not update it. Every rank keeps it (the weights are
// identical on all ranks), so any rank can write it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace wt::train {

class Ema {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
  // Starts as a copy of `weights` (which it keeps referring to).
  Ema(NamedTensors weights, double decay);

  // One update: per tensor (lerp_) on the CPU, with multi-tensor ops on a
  // GPU, where a kernel launch per tensor would cost more than the update.
  void update();
  // The multi-tensor update update() takes on a GPU: ema += (1 - decay) *
  // (weight - ema) over all tensors at once. Public so that its arithmetic
  // is tested on the CPU.
  void update_multi_tensor();
  double decay() const { return decay_; }
  // The averaged weights, under the same names.
  const NamedTensors& averages() const { return averages_; }

 private:
  NamedTensors weights_;
  NamedTensors averages_;
  double decay_;
};

}  // namespace wt::train
