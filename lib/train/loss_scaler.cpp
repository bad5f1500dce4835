#include "wantrain/train/loss_scaler.hpp"

#include <algorithm>

namespace wt::train {

void LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    // Never below 1: a scale that small means the model itself diverged.
    scale_ = std::max(1.0, scale_ * options_.backoff_factor);
    good_steps_ = 0;
    return;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

}  // namespace wt::train
