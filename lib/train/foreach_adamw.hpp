// AdamW's step in multi-tensor ops: the arithmetic of torch::optim::AdamW
// (decoupled weight decay, bias-corrected moments), each operation applied
// to every parameter at once with LibTorch's _foreach_ ops, which CUDA runs
// as a few fused kernels instead of about eight per parameter (on the CPU
// they loop over the tensors, as AdamW does). The state stays the
// optimizer's own (AdamWParamState per parameter), so checkpoints, resume
// and ZeRO's slices are unchanged.
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

}  // namespace wt::train
