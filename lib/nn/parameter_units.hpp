// ParameterUnits: a model's parameters sharded by unit (ZeRO-3), each unit
// whole only around the code that reads it. The units are the repeated
// blocks (parameters named "blocks.<i>.") and the root: every other
// parameter (embeddings, head), whole from the start of a forward until
// its gradients have arrived. A model that supports sharding calls, in forward:
//
//   begin_forward();                          the root whole
//   for each block i:
//     before_block(i);                        block i whole, i + 1's gather started
//     x = after_block(i, block(x));           block i released; in grad mode a hook
//                                             on x gathers it again for backward
//   end_forward();
//
// The implementation (train::ZeroShards) decides when each unit's memory
// exists; the model only says where its units begin and end. A model may run
// parameters registered elsewhere between before_block(i) and after_block(i)
// and put them in block i's unit (a VACE block beside the base block it
// follows: wan::zero_unit).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace wt::nn {

// The unit a parameter belongs to: "blocks.<i>" for a block's, "head" for
// the output head's (the root's part whose gradients come first in
// backward), "" for the rest of the root (embeddings: theirs come last).
std::string parameter_unit(const std::string& name);
// Whether a unit is part of the root ("" or "head"): gathered for the whole step.
bool root_unit(const std::string& unit);

class ParameterUnits {
 public:
  virtual ~ParameterUnits() = default;
  virtual void begin_forward() = 0;
  virtual void before_block(int64_t block) = 0;
  // Returns `output` (with, in grad mode, a hook that gathers the block again
  // before its backward runs).
  virtual at::Tensor after_block(int64_t block, const at::Tensor& output) = 0;
  virtual void end_forward() = 0;
  // A unit beside the chain of blocks (a VACE block, whose parameters are
  // named "vace_blocks.<i>."): whole from before_side until after_side
  // (block swap's; ZeRO-3 holds VACE blocks in their base block's unit).
  // before_side returns `input` (with, in grad mode, a hook that releases
  // the unit once the gradient reaches its input: its backward is done);
  // after_side returns `output` (with, in grad mode, a hook that brings the
  // unit back before its backward). Units that keep these whole (ZeRO-3's
  // root) need not implement them.
  virtual at::Tensor before_side(int64_t side, const at::Tensor& input) { return input; }
  virtual at::Tensor after_side(int64_t side, const at::Tensor& output) { return output; }
  // Seconds spent waiting for units (a gather, a copy) since the last call.
  virtual double take_wait_seconds() { return 0; }
};

}  // namespace wt::nn
