// Dynamic loss scaling for fp16 training (GradScaler's rule): the loss is
// multiplied by `scale` before backward so small fp16 gradients do not flush
// to zero; the gradients are divided by it before clipping. A step whose
// gradients are non-finite is skipped and the scale halved; after
// `growth_interval` finite steps in a row it doubles. Every rank sees the
// same (all-reduced) gradients, so every rank takes the same decisions.
#pragma once

#include <cstdint>

namespace wt::train {

struct LossScalerOptions {
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {}) : options_(options), scale_(options.initial_scale) {}

  double scale() const { return scale_; }
  // Records one step's outcome and adjusts the scale.
  void update(bool gradients_finite);

  // For checkpoints.
  int64_t good_steps() const { return good_steps_; }
  void restore(double scale, int64_t good_steps) { scale_ = scale, good_steps_ = good_steps; }

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
};

}  // namespace wt::train
