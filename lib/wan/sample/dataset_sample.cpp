#include "wantrain/wan/sample/dataset_sample.hpp"

#include <torch/torch.h>

#include "wantrain/data/shard.hpp"

namespace wt::wan {

DatasetSample read_dataset_sample(const data::Dataset& dataset, int64_t index) {
  const auto& s = dataset.shape_of(index);  // a bucketed dataset: that sample's shape
  DatasetSample sample;
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
  auto context = torch::empty({s.text_len, s.text_dim}, data::scalar_type(s.text));
  data::SampleCondition condition;
  if (s.has_condition()) {
    condition.y = torch::empty({s.condition_channels, s.frames, s.height, s.width}, data::scalar_type(s.latents));
    if (s.clip_tokens > 0) condition.clip_fea = torch::empty({s.clip_tokens, s.clip_dim}, data::scalar_type(s.text));
  }
  if (s.has_vace())
    condition.vace_context =
        torch::empty({s.vace_channels, s.vace_references + s.frames, s.height, s.width}, data::scalar_type(s.latents));
  data::SampleReader reader(dataset);
  reader.read(index, latents, context, sample.text_len, s.has_condition() || s.has_vace() ? &condition : nullptr);
  sample.latents = latents.to(torch::kFloat32);
  sample.context = context.to(torch::kFloat32);
  if (condition.y.defined()) sample.image.y = condition.y.to(torch::kFloat32).unsqueeze(0);
  if (condition.clip_fea.defined()) sample.image.clip_fea = condition.clip_fea.to(torch::kFloat32).unsqueeze(0);
  if (condition.vace_context.defined())
    sample.image.vace_context = condition.vace_context.to(torch::kFloat32).unsqueeze(0);
  sample.prompt = reader.prompt(index);
  return sample;
}

std::vector<int64_t> videos_of_prompt(const data::Dataset& dataset, int64_t index) {
  data::SampleReader reader(dataset);
  const std::string prompt = reader.prompt(index);
  if (prompt.empty()) return {index};
  const auto& shape = dataset.shape_of(index);
  std::vector<int64_t> videos;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const auto& s = dataset.shape_of(i);
    const bool same_shape =
        s.channels == shape.channels && s.frames == shape.frames && s.height == shape.height && s.width == shape.width;
    if (same_shape && (i == index || reader.prompt(i) == prompt)) videos.push_back(i);
  }
  return videos;
}

}  // namespace wt::wan
