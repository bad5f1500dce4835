// A WanModel whose blocks' weights are sharded over the ranks of a job that
// samples together (wansample --shard-weights, as the official scripts'
// --dit_fsdp): each rank keeps 1/N of every block's weights and gathers a
// block whole just before its forward (the next block's gather in flight),
// releasing it after, as training's ZeRO-3 does (train/zero_shards.hpp),
// a VACE block with the base block it follows (zero_unit); the root
// (embeddings, head) stays whole on every rank. The weights are
// read into the slices block by block, so no rank ever holds the whole
// model: one of Wan2.2 A14B's experts, 27 GiB in bf16, takes 3.4 GiB a rank
// on 8 ranks, plus a block gathered.
//
// The gathered weights are the loaded values exactly, so a sharded model
// computes what the whole one does, bit for bit.
//
// Collective contract: constructed on every rank over the same config and
// weights; every rank then runs the same forwards (all the ranks of
// `comm`, whatever other groups split the work), so the gathers match.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

class ShardedBlocks : public nn::ParameterUnits {
 public:
  // Loads `source` (checked to fit already: check_weights_fit) into
  // `model` on `device`: the root's parameters whole, each block's as this
  // rank's slices; the blocks' parameters hold no memory until gathered.
  // Sets itself as the model's parameter units; it must outlive the
  // model's forwards.
  ShardedBlocks(distributed::Comm& comm, WanModelImpl& model, const TensorSource& source, const c10::Device& device);

  void begin_forward() override {}
  void before_block(int64_t block) override;
  at::Tensor after_block(int64_t block, const at::Tensor& output) override;
  void end_forward() override {}

  // The bytes of weights this rank keeps: its slices and the root.
  int64_t held_bytes() const { return held_bytes_; }

 private:
  // A block's parameters of one dtype, laid end to end in one flat buffer
  // padded to a multiple of the ranks.
  struct Group {
    std::vector<std::string> names;
    std::vector<at::Tensor> parameters;
    std::vector<std::vector<int64_t>> shapes;
    at::Tensor slice;  // this rank's [padded / N]
    at::Tensor whole;  // [padded] while gathered (or gathering)
    distributed::WorkPtr gathering;
  };
  void start_gather(int64_t block);

  distributed::Comm& comm_;
  std::vector<std::vector<Group>> blocks_;
  int64_t held_bytes_ = 0;
};

}  // namespace wt::wan
