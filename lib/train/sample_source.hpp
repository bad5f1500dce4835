// Where an Engine's batches come from, for any model family.
//
// SampleSource  random access to a dataset's samples as named tensors (a
//               held-out set for validation, an in-memory table).
// BatchSource   this rank's training batches in sampler order, one optimizer
//               step (B x K samples) at a time, and where it stands, for
//               checkpoints. SampledBatches reads a SampleSource on the
//               training thread; ShardBatches (shard_source.hpp) prefetches
//               HDF5 shards on a thread of its own.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "wantrain/data/sampler.hpp"
#include "wantrain/train/objective.hpp"

namespace wt::train {

// Samples that can share a batch (a dataset's bucket: one latent shape).
struct SampleGroup {
  std::string name;  // "" for the one group of a source without buckets
  std::vector<int64_t> indices;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  // The samples `indices` (of one group) as one batch on the CPU, in that order.
  virtual Batch read(const std::vector<int64_t>& indices) = 0;
  // The groups whose samples may be batched together; all in one by default.
  virtual std::vector<SampleGroup> groups() const {
    SampleGroup all;
    all.indices.resize(static_cast<size_t>(size()));
    std::iota(all.indices.begin(), all.indices.end(), int64_t{0});
    return {all};
  }
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // This rank's next batch; `epoch` is set to the epoch it belongs to.
  virtual Batch next(int64_t& epoch) = 0;
  // Where the next batch starts (what a checkpoint stores).
  virtual data::SamplerState position() const = 0;
};

// A BatchSource over a SampleSource, in a DistributedSampler's order.
class SampledBatches final : public BatchSource {
 public:
  // `samples` must outlive this object; `sampler` starts at its own state.
  SampledBatches(SampleSource& samples, data::DistributedSampler sampler)
      : samples_(samples), sampler_(std::move(sampler)) {}
  Batch next(int64_t& epoch) override {
    epoch = sampler_.state().epoch;
    return samples_.read(sampler_.next());
  }
  data::SamplerState position() const override { return sampler_.state(); }

 private:
  SampleSource& samples_;
  data::DistributedSampler sampler_;
};

}  // namespace wt::train
