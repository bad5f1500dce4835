// What a WanModel forward shows step caching (sample/step_cache.hpp): the
// block stack, nearly all of the model's work, may be skipped on a step and
// its output taken as the input plus a residual cached from an earlier step
// (TeaCache, MagCache, EasyCache). The model asks before running the blocks
// and tells after; what to measure and when to skip is the cache's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "wantrain/distributed/comm.hpp"

namespace wt::wan {

// One forward's block stack as this rank sees it.
struct BlockStack {
  at::Tensor input;  // [B, Lr, dim] the tokens entering block 0 (this rank's part under --sp)
  at::Tensor e;      // time embedding [B, dim] or per token [B, Lr, dim], fp32
  at::Tensor e0;     // its projection, the blocks' modulation [B, 6, dim] or [B, Lr, 6, dim], fp32
  // The rows of `input` (dim 1) that are tokens; the rest pad the sequence
  // to a multiple of the sequence group.
  int64_t valid_tokens = 0;
  // The sequence group whose ranks hold the other tokens (nullptr: this rank
  // holds them all): statistics over tokens are sums over it, so that every
  // rank of the group decides alike.
  distributed::Comm* group = nullptr;
};

class BlockStackCache {
 public:
  virtual ~BlockStackCache() = default;
  // Before the blocks: the stack's output for this step when it is skipped,
  // else an undefined tensor (the blocks run).
  virtual at::Tensor skip(const BlockStack& stack) = 0;
  // After the blocks ran: their output [B, Lr, dim].
  virtual void ran(const BlockStack& stack, const at::Tensor& output) = 0;
};

}  // namespace wt::wan
