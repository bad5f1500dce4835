// Activation checkpointing of Wan blocks (--grad-checkpoint): a block's
// forward keeps none of its activations, and backward runs the block again
// to get them. LibTorch's C++ API has no torch.utils.checkpoint, so this is
// a custom autograd function, built the way PyTorch's reentrant checkpoint
// is, with two differences that matter here:
//
// - The block's trainable parameters are inputs of the function, so a block
//   whose activations need no gradient (a LoRA run's first block: frozen
//   embeddings upstream) still gets its adapters' gradients, and those
//   reach each parameter's AccumulateGrad through the engine as any other
//   gradient does: the Reducer's hooks fire as without checkpointing.
// - The autocast state and the device's generator state of the forward are
//   restored for the recomputation (LoRA dropout draws the same mask), and
//   the generator is put back afterwards, so a run draws the same numbers
//   with and without checkpointing.
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::model {

class WanBlockImpl;
struct RopeTable;

// block(x, e0, context, rope), recomputed in backward. Without grad mode it
// is the block's plain forward.
at::Tensor recomputed_block(WanBlockImpl& block, const at::Tensor& x, const at::Tensor& e0, const at::Tensor& context,
                            const RopeTable& rope);

}  // namespace wt::model
