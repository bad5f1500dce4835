// The HDF5 shard dataset (lib/data) as the train layer's sources: a batch
// holds "latents" [B, C, F, H, W] and "text_emb" [B, L, D].
#pragma once

#include <memory>
#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/train/sample_source.hpp"

namespace wt::data {
class Loader;
}

namespace wt::train {

// Random access for validation: samples read as the stored dtype.
class ShardSamples final : public SampleSource {
 public:
  explicit ShardSamples(data::Dataset dataset);
  ~ShardSamples() override;
  int64_t size() const override { return dataset_.size(); }
  Batch read(const std::vector<int64_t>& indices) override;
  const data::Dataset& dataset() const { return dataset_; }

 private:
  data::Dataset dataset_;
  std::unique_ptr<data::SampleReader> reader_;
};

// Training batches from the prefetching Loader. On GPU the loader hands over
// the stored dtype (half the bytes to copy for fp16 data) and the device
// converts; on CPU its thread converts to fp32, off the training thread.
class ShardBatches final : public BatchSource {
 public:
  ShardBatches(data::Dataset dataset, data::DistributedSampler sampler, int prefetch, bool device_converts);
  ~ShardBatches() override;
  Batch next(int64_t& epoch) override;
  data::SamplerState position() const override;

 private:
  std::unique_ptr<data::Loader> loader_;
};

}  // namespace wt::train
