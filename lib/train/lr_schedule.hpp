// The learning rate at each optimizer step: linear warm-up from lr/warmup to
// lr over `warmup_steps`, then constant or a cosine decay to 0 at the last
// step. --scale-lr multiplies --lr by the effective batch first (the linear
// scaling rule as diffusers' --scale_lr applies it: --lr is then the rate
// per sample of the effective batch).
#pragma once

#include <cstdint>

namespace wt::train {

enum class Schedule { Constant, Cosine };

// lr x effective batch when `scale`, else lr.
double scaled_lr(double lr, int64_t effective_batch, bool scale);

struct LrSchedule {
  double peak = 1e-4;  // after scaling
  Schedule kind = Schedule::Constant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // The rate for optimizer step `step` (0-based).
  double at(int64_t step) const;
};

}  // namespace wt::train
