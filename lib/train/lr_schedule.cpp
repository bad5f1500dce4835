#include "wantrain/train/lr_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "wantrain/util/error.hpp"

namespace wt::train {

double scaled_lr(double lr, int64_t effective_batch, bool scale) {
  return scale ? lr * static_cast<double>(effective_batch) : lr;
}

double LrSchedule::at(int64_t step) const {
  // Warm-up reaches the peak on step warmup_steps - 1, never starting at 0
  // (a zero-rate first step would be wasted).
  if (step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
  if (kind == Schedule::Constant) return peak;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return 0.5 * peak * (1.0 + std::cos(M_PI * progress));
}

}  // namespace wt::train
