// Activation checkpointing (--grad-checkpoint): a module's forward keeps
// none of its activations, and backward runs the module again to get them.
// LibTorch's C++ API has no torch.utils.checkpoint, so this is a custom
// autograd function, built the way PyTorch's reentrant checkpoint is, with
// two differences that matter here:
//
// - The module's trainable parameters are inputs of the function, so a
//   module whose activations need no gradient (a LoRA run's first Wan block:
//   frozen embeddings upstream) still gets its adapters' gradients, and those
//   reach each parameter's AccumulateGrad through the engine as any other
//   gradient does: the Reducer's hooks fire as without checkpointing.
// - The autocast state and the device's generator state of the forward are
//   restored for the recomputation (LoRA dropout draws the same mask), and
//   the generator is put back afterwards, so a run draws the same numbers
//   with and without checkpointing.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <vector>

#include "wantrain/nn/activation_offload.hpp"

namespace wt::nn {

// A module whose forward is a function of tensors alone, so that it can be
// run again in backward (a Wan block: x, the time modulation, the context
// and the RoPE table).
class Recomputable : public torch::nn::Module {
 public:
  virtual at::Tensor forward_tensors(const std::vector<at::Tensor>& inputs) = 0;
};

// module.forward_tensors(inputs), recomputed in backward. Without grad mode
// it is the plain forward. The first input sets the device and the autocast
// dtype the recomputation runs under. `inputs` are activations, never the
// module's own parameters (those are added as inputs here: passed twice,
// a parameter would get its gradient twice).
// With `offload`, the first input waits in host memory until backward
// (nn/activation_offload.hpp).
at::Tensor recomputed(Recomputable& module, const std::vector<at::Tensor>& inputs,
                      ActivationOffload* offload = nullptr);

}  // namespace wt::nn
