// The HDF5 shard dataset (lib/data) as the train layer's sources: a batch
// holds "latents" [B, C, F, H, W] and "text_emb" [B, L, D]; from an
// image-to-video dataset also "y" [B, Cy, F, H, W] (in the latents' dtype)
// and, where the shards have it, "clip_fea" [B, T, D] (in text_emb's).
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
  // One group per bucket, named by its latent shape ("5x32x32"); a dataset
  // of one shape is one unnamed group.
  std::vector<SampleGroup> groups() const override;
  const data::Dataset& dataset() const { return dataset_; }

 private:
  data::Dataset dataset_;
  std::unique_ptr<data::SampleReader> reader_;
};

struct ShardBatchesOptions {
  int prefetch = 2;
  // Batches go to a GPU: the loader hands over the stored dtype (half the
  // bytes to copy for fp16 data) in pinned buffers, and the device
  // converts. Otherwise the loader's thread converts to fp32, off the
  // training thread.
  bool for_gpu = false;
  // Makes the objective's inputs ahead on the loader's thread
  // (Objective::make_inputs_ahead); the batches are those of steps
  // first_step, first_step + 1, ... Optional.
  const Objective* objective = nullptr;
  int64_t first_step = 0;
};

// Bytes of one sample ShardBatches' loader reads as stored before converting
// it (data/loader.cpp): the parts stored in another dtype than it hands over
// (the stored one when batches go to a GPU and latents and text share it,
// fp32 otherwise); y goes as the latents, clip_fea as the text.
int64_t staged_bytes_per_sample(const data::SampleShape& shape, bool for_gpu);

// Training batches from the prefetching Loader.
class ShardBatches final : public BatchSource {
 public:
  ShardBatches(data::Dataset dataset, data::DistributedSampler sampler, const ShardBatchesOptions& options);
  ~ShardBatches() override;
  Batch next(int64_t& epoch) override;
  data::SamplerState position() const override;

 private:
  std::unique_ptr<data::Loader> loader_;
  int64_t first_step_ = 0;
  bool has_ahead_ = false;
};

}  // namespace wt::train
