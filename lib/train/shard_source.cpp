#include "wantrain/train/shard_source.hpp"

#include <torch/torch.h>

#include "wantrain/data/loader.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::train {

ShardSamples::ShardSamples(data::Dataset dataset)
    : dataset_(std::move(dataset)), reader_(std::make_unique<data::SampleReader>(dataset_)) {}

ShardSamples::~ShardSamples() = default;

Batch ShardSamples::read(const std::vector<int64_t>& indices) {
  const auto& shape = dataset_.shape();
  const int64_t b = int64_t(indices.size());
  auto latents = torch::empty({b, shape.channels, shape.frames, shape.height, shape.width},
                              data::scalar_type(shape.latents));                                 // [B, C, F, H, W]
  auto text = torch::empty({b, shape.text_len, shape.text_dim}, data::scalar_type(shape.text));  // [B, L, D]
  for (int64_t i = 0; i < b; ++i) {
    int32_t text_len = 0;
    reader_->read(indices[size_t(i)], latents[i], text[i], text_len);
  }
  Batch batch;
  batch.indices = indices;
  batch.tensors.emplace("latents", std::move(latents));
  batch.tensors.emplace("text_emb", std::move(text));
  return batch;
}

ShardBatches::ShardBatches(data::Dataset dataset, data::DistributedSampler sampler, int prefetch,
                           bool device_converts) {
  data::LoaderOptions options;
  options.prefetch = prefetch;
  const auto& shape = dataset.shape();
  options.dtype = device_converts && shape.latents == shape.text ? data::scalar_type(shape.latents) : at::kFloat;
  loader_ = std::make_unique<data::Loader>(std::move(dataset), std::move(sampler), options);
}

ShardBatches::~ShardBatches() = default;

Batch ShardBatches::next(int64_t& epoch) {
  data::Batch loaded = loader_->next();
  epoch = loaded.position.epoch;
  Batch batch;
  batch.indices = std::move(loaded.indices);
  batch.tensors.emplace("latents", std::move(loaded.latents));
  batch.tensors.emplace("text_emb", std::move(loaded.text_emb));
  return batch;
}

data::SamplerState ShardBatches::position() const { return loader_->state(); }

}  // namespace wt::train
