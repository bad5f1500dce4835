// The collectives of Ulysses sequence parallelism, with their gradients:
// each rank of a group of N holds a contiguous 1/N of a sample's tokens,
// and self-attention swaps that for 1/N of the heads with every token
// (DeepSpeed-Ulysses; Wan2.2's wan/distributed/ulysses.py).
//
// Contract: every rank of `group` calls them in the same order with the
// same shapes (Comm's contract); tensors on the group's device. The
// backward of each runs the matching collective, so the ranks' backward
// passes must meet in the same order too (they do: one graph, one order).
#pragma once

#include <ATen/core/Tensor.h>

namespace wt::distributed {

class Comm;

// x [B, Ls, H, D] (this rank's Ls tokens, every head) -> [B, N·Ls, H/N, D]
// (every rank's tokens in rank order, this rank's heads: group rank r takes
// heads [r·H/N, (r+1)·H/N)). H divisible by N. Its backward is
// heads_to_sequence of the gradient.
at::Tensor sequence_to_heads(const at::Tensor& x, Comm& group);

// The inverse: [B, N·Ls, H/N, D] -> [B, Ls, H, D].
at::Tensor heads_to_sequence(const at::Tensor& x, Comm& group);

// x [B, Ls, ...] (this rank's tokens) -> [B, N·Ls, ...], every rank's in rank
// order. Every rank of the group is taken to compute the same loss from the
// result (the whole sample's), so the gradient of this rank's tokens is
// its own rows of the result's gradient: nothing is summed.
at::Tensor gather_sequence(const at::Tensor& x, Comm& group);

}  // namespace wt::distributed
