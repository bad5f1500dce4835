// ZeroShards: ZeRO stage 1 (optimizer-state sharding) over the Reducer's
// gradient buckets.
//
// The trainable parameters become views into flat buffers laid out exactly
// as the Reducer's (sharding) buckets, padding included, so that rank r's
// slice r of a bucket holds the same elements of the weights as the reduced
// gradient shard it receives. The optimizer and the EMA work on these
// slices only: 1/W of their state per rank. After the update an in-place
// all-gather per bucket gives every rank the whole new weights.
//
// Collective contract: constructed on every rank after the Reducer (whose
// broadcast made the weights equal), over the same parameters.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/train/objective.hpp"

namespace wt::distributed {
class Comm;
class Reducer;
}  // namespace wt::distributed

namespace wt::train {

class ZeroShards {
 public:
  // Elements [param_offset, param_offset + count) of parameter `name`
  // (numel elements in all) lie at shard_offset in this rank's slice of `bucket`.
  struct Piece {
    std::string name;
    size_t bucket = 0;
    int64_t shard_offset = 0, param_offset = 0, count = 0, numel = 0;
  };

  // Re-points each parameter in `trainable` at its place in the flat buffers
  // (Tensor::set_data: the same parameter objects, now views).
  ZeroShards(distributed::Comm& comm, const distributed::Reducer& reducer, const NamedTensors& trainable);

  // Per bucket, this rank's slice of the weights: [bucket numel / W] views.
  const std::vector<at::Tensor>& parameter_shards() const { return shards_; }
  // The parameters' parts in this rank's slices, bucket by bucket.
  const std::vector<Piece>& pieces() const { return pieces_; }

  // Collective: every rank's updated slices, into every rank's weights.
  void all_gather_parameters();
  // Collective: per-bucket slices laid out like parameter_shards() (the
  // EMA's, say), gathered whole and cut into tensors shaped like the
  // parameters, by name.
  NamedTensors gather(const std::vector<at::Tensor>& slices) const;

 private:
  distributed::Comm& comm_;
  NamedTensors trainable_;
  std::vector<at::Tensor> flat_;    // per bucket [numel], the weights
  std::vector<at::Tensor> shards_;  // per bucket [numel / W], views of flat_
  std::vector<Piece> pieces_;
  struct Place {
    size_t bucket;
    int64_t offset;
  };
  std::vector<Place> places_;  // of trainable_[i] in the flat buffers
};

}  // namespace wt::train
