// ActivationOffload (--activation-offload, with --grad-checkpoint): the
// input each checkpointed block keeps for its recomputation waits in host
// memory (page-locked on a GPU) instead of on the device, and comes back one
// block ahead in backward: when block i is recomputed, block i - 1's input
// is already on its way. The other inputs of a block (time modulation,
// context, RoPE table) are the same tensors for every block and stay.
//
// On a GPU the copies run on a side stream of their own, in order, fenced
// with events both ways; a tensor copied out is recorded on that stream so
// that its memory outlives the copy. On the CPU the copy is a copy: a run
// computes what it computes without offloading, bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace wt::nn {

class ActivationOffload {
 public:
  ActivationOffload();
  ~ActivationOffload();

  // A forward with gradients begins: what an earlier one left is dropped.
  void begin_forward();
  // Queues the copy of `input` to host memory; returns its index for bring_back.
  int64_t keep(const at::Tensor& input);
  // The input `index` again, on its device (its copy waited for), and the
  // copy of index - 1 queued. Each index is brought back once.
  at::Tensor bring_back(int64_t index);

  // The bytes held in host memory now.
  double host_bytes() const;

 private:
  struct Entry;
  void fetch(int64_t index);

  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace wt::nn
