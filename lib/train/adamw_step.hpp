// AdamW's step outside torch::optim::AdamW's loop of about eight tensor ops
// per parameter: the same arithmetic (decoupled weight decay, then
// bias-corrected moments), taken
//   foreach_adamw_step  with LibTorch's multi-tensor _foreach_ ops, which
//                       CUDA runs as a few fused kernels for all parameters;
//   fused_adamw_step    on the CPU as one pass over each parameter's memory
//                       (reading p, g, m and v once, writing p, m and v once)
//                       instead of a pass per op.
// Both keep the optimizer's own state (AdamWParamState per parameter), so
// checkpoints, resume and ZeRO's slices are unchanged; both equal
// torch::optim::AdamW to 1e-6 (tests/unit/train/optimizer_parts_test.cpp).
#pragma once

#include <torch/optim/adamw.h>

namespace wt::train {

// The key under which `optimizer.state()` holds `parameter`'s state (its
// TensorImpl: the address as a string up to LibTorch 2.1, the pointer from
// 2.2 on).
using OptimizerKey = std::decay_t<decltype(std::declval<torch::optim::AdamW&>().state())>::key_type;
OptimizerKey optimizer_key(const at::Tensor& parameter);

// One AdamW step of every parameter with a gradient, as optimizer.step()
// takes it (amsgrad is not supported: wantrain never sets it).
void foreach_adamw_step(torch::optim::AdamW& optimizer);
// The same for CPU parameters: fp32 contiguous ones in one fused pass each
// (split over the intra-op threads), others with tensor ops.
void fused_adamw_step(torch::optim::AdamW& optimizer);

}  // namespace wt::train
