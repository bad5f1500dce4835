#include "wantrain/train/shard_source.hpp"

#include <torch/torch.h>

#include "wantrain/data/loader.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::train {

ShardSamples::ShardSamples(data::Dataset dataset)
    : dataset_(std::move(dataset)), reader_(std::make_unique<data::SampleReader>(dataset_)) {}

ShardSamples::~ShardSamples() = default;

std::vector<SampleGroup> ShardSamples::groups() const {
  const auto& buckets = dataset_.buckets();
  if (buckets.size() == 1) return SampleSource::groups();
  std::vector<SampleGroup> groups;
  for (size_t b = 0; b < buckets.size(); ++b) groups.push_back({buckets[b].name(), dataset_.bucket_indices(b)});
  return groups;
}

Batch ShardSamples::read(const std::vector<int64_t>& indices) {
  const auto& shape = dataset_.shape_of(indices.front());
  const int64_t b = int64_t(indices.size());
  auto latents = torch::empty({b, shape.channels, shape.frames, shape.height, shape.width},
                              data::scalar_type(shape.latents));                                 // [B, C, F, H, W]
  auto text = torch::empty({b, shape.text_len, shape.text_dim}, data::scalar_type(shape.text));  // [B, L, D]
  // The image-to-video condition, stored as the latents and the text are.
  const bool with_clip = shape.has_condition() && shape.clip_tokens > 0;
  auto y = shape.has_condition() ? torch::empty({b, shape.condition_channels, shape.frames, shape.height, shape.width},
                                                data::scalar_type(shape.latents))
                                 : torch::Tensor();  // [B, Cy, F, H, W]
  auto clip = with_clip ? torch::empty({b, shape.clip_tokens, shape.clip_dim}, data::scalar_type(shape.text))
                        : torch::Tensor();  // [B, T, D]
  auto vace =
      shape.has_vace()
          ? torch::empty({b, shape.vace_channels, shape.vace_references + shape.frames, shape.height, shape.width},
                         data::scalar_type(shape.latents))
          : torch::Tensor();  // [B, Cv, R + F, H, W]
  for (int64_t i = 0; i < b; ++i) {
    int32_t text_len = 0;
    data::SampleCondition condition;
    if (y.defined()) condition.y = y[i];
    if (clip.defined()) condition.clip_fea = clip[i];
    if (vace.defined()) condition.vace_context = vace[i];
    reader_->read(indices[size_t(i)], latents[i], text[i], text_len,
                  y.defined() || vace.defined() ? &condition : nullptr);
  }
  Batch batch;
  batch.indices = indices;
  batch.tensors.emplace("latents", std::move(latents));
  batch.tensors.emplace("text_emb", std::move(text));
  if (y.defined()) batch.tensors.emplace("y", std::move(y));
  if (clip.defined()) batch.tensors.emplace("clip_fea", std::move(clip));
  if (vace.defined()) batch.tensors.emplace("vace_context", std::move(vace));
  return batch;
}

namespace {

// The dtype the loader hands over (staged_bytes_per_sample says which).
at::ScalarType loader_dtype(const data::SampleShape& shape, bool for_gpu) {
  return for_gpu && shape.latents == shape.text ? data::scalar_type(shape.latents) : at::kFloat;
}

}  // namespace

int64_t staged_bytes_per_sample(const data::SampleShape& shape, bool for_gpu) {
  const auto dtype = loader_dtype(shape, for_gpu);
  // y and vace_context are staged as the latents are, clip_fea as the text is.
  const int64_t y_bytes =
      (shape.condition_channels * shape.frames + shape.vace_channels * (shape.vace_references + shape.frames)) *
      shape.height * shape.width * int64_t(c10::elementSize(data::scalar_type(shape.latents)));
  const int64_t clip_bytes = shape.condition_bytes() - y_bytes;
  return (data::scalar_type(shape.latents) != dtype ? shape.latents_bytes() + y_bytes : 0) +
         (data::scalar_type(shape.text) != dtype ? shape.text_bytes() + clip_bytes : 0);
}

ShardBatches::ShardBatches(data::Dataset dataset, data::DistributedSampler sampler,
                           const ShardBatchesOptions& options) {
  data::LoaderOptions loader;
  loader.prefetch = options.prefetch;
  loader.dtype = loader_dtype(dataset.buckets().front().shape, options.for_gpu);  // buckets share the dtypes
  loader.pin_memory = options.for_gpu;
  if (const Objective* objective = options.objective) {
    const int64_t first_step = options.first_step;
    loader.finish = [objective, first_step](data::Batch& loaded, const data::LoaderOptions::Allocate& allocate) {
      Batch batch;  // the objective sees the batch as the Engine will
      batch.indices = loaded.indices;
      batch.tensors.emplace("latents", loaded.latents);
      batch.tensors.emplace("text_emb", loaded.text_emb);
      if (loaded.y.defined()) batch.tensors.emplace("y", loaded.y);
      if (loaded.clip_fea.defined()) batch.tensors.emplace("clip_fea", loaded.clip_fea);
      if (loaded.vace_context.defined()) batch.tensors.emplace("vace_context", loaded.vace_context);
      objective->make_inputs_ahead(batch, first_step + loaded.number, allocate);
      for (const char* name : {"latents", "text_emb", "y", "clip_fea", "vace_context"}) batch.tensors.erase(name);
      loaded.extra = std::move(batch.tensors);
    };
  }
  loader_ = std::make_unique<data::Loader>(std::move(dataset), std::move(sampler), loader);
  first_step_ = options.first_step;
  has_ahead_ = options.objective != nullptr;
}

ShardBatches::~ShardBatches() = default;

Batch ShardBatches::next(int64_t& epoch) {
  data::Batch loaded = loader_->next();
  epoch = loaded.position.epoch;
  Batch batch;
  batch.indices = std::move(loaded.indices);
  batch.tensors = std::move(loaded.extra);
  batch.tensors.emplace("latents", std::move(loaded.latents));
  batch.tensors.emplace("text_emb", std::move(loaded.text_emb));
  if (loaded.y.defined()) batch.tensors.emplace("y", std::move(loaded.y));
  if (loaded.clip_fea.defined()) batch.tensors.emplace("clip_fea", std::move(loaded.clip_fea));
  if (loaded.vace_context.defined()) batch.tensors.emplace("vace_context", std::move(loaded.vace_context));
  if (has_ahead_) batch.ahead_step = first_step_ + loaded.number;
  batch.copied = std::move(loaded.copied);
  return batch;
}

data::SamplerState ShardBatches::position() const { return loader_->state(); }

}  // namespace wt::train
