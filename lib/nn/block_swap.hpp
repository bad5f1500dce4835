// BlockSwap (--blocks-to-swap N): the frozen weights of a model's first N
// blocks live in host memory (page-locked on a GPU run) and each block's
// are copied to the device just before it runs, the next block's copy
// queued while it computes, and dropped after. In backward the same, in
// the other order: a block is brought back when its output's gradient is
// complete (before its recomputation under checkpointing) with the block
// before it queued, and dropped when its input's gradient is. The block's
// buffers (an fp8 weight's scales) go with its weights; trained parameters
// (LoRA adapters) stay on the device.
//
// On a GPU the copies run on a side stream, fenced with an event that the
// compute stream waits for; the device copy is recorded on the compute
// stream so that dropping it never frees memory a queued kernel reads. On
// the CPU the copy is a copy: a run computes what it computes without
// swapping, bit for bit.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/nn/parameter_units.hpp"

namespace wt::nn {

class BlockSwap : public ParameterUnits {
 public:
  // Takes the frozen parameters of blocks 0 .. count - 1 ("blocks.<i>."
  // names), and of the side blocks 0 .. side_count - 1 ("vace_blocks.<i>.",
  // a VACE model's, each brought whole around its use: before_side,
  // after_side), out of `model` into host memory. Call before the model is
  // moved to `device`, so that they never go there whole; then set it as the
  // model's parameter units. It must outlive the model's forwards and
  // backwards.
  BlockSwap(torch::nn::Module& model, int64_t count, const c10::Device& device, int64_t side_count = 0);
  ~BlockSwap() override;

  void begin_forward() override;
  void before_block(int64_t block) override;
  at::Tensor after_block(int64_t block, const at::Tensor& output) override;
  void end_forward() override {}
  at::Tensor before_side(int64_t side, const at::Tensor& input) override;
  at::Tensor after_side(int64_t side, const at::Tensor& output) override;

  int64_t count() const { return int64_t(blocks_.size()); }
  int64_t side_count() const { return int64_t(sides_.size()); }
  // The bytes of the swapped weights held in host memory.
  double host_bytes() const { return host_bytes_; }
  // The swapped tensors' values as held in host memory, by the model's
  // names: what a weights file writes for them (the model's own are empty
  // while their block is away).
  std::vector<std::pair<std::string, at::Tensor>> host_tensors() const;
  // Seconds this thread spent copying blocks or waiting for their copies, since the last call.
  double take_wait_seconds() override;

 private:
  struct Block;
  Block* block_at(int64_t block) const;  // null outside 0 .. count - 1
  void fetch(int64_t block);             // queues the copy (no-op when present or queued)
  void wait(int64_t block);              // the copy done, as seen by the compute stream
  void fetch(Block& b);
  void wait(Block& b);
  void drop(Block& b);
  void drop(int64_t block);

  c10::Device device_;
  int64_t total_blocks_ = 0;
  std::vector<std::unique_ptr<Block>> blocks_, sides_;
  double host_bytes_ = 0, wait_seconds_ = 0;
};

}  // namespace wt::nn
