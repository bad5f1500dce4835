// The latents of a one-sample shard, as wansample writes it (--out).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/data/shard.hpp"

namespace wt::testing {

inline at::Tensor sampled_latents(const std::string& shard) {
  const auto info = wt::data::inspect_shard(shard);
  const auto dataset = wt::data::Dataset::of(std::filesystem::path(shard).parent_path().string(), {info});
  const auto& s = info.shape;
  auto latents = torch::empty({s.channels, s.frames, s.height, s.width});
  auto text = torch::empty({s.text_len, s.text_dim});
  int32_t len = 0;
  wt::data::SampleReader(dataset).read(0, latents, text, len);
  return latents;
}

}  // namespace wt::testing
