// Test helpers: small shards with values derived from (shard seed, row), so
// tests can compute what a reader must return.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "wantrain/data/shard.hpp"

namespace wt::testing {

// latents of sample `row` in a shard made with `seed`: value = seed + row + position / 1000
inline torch::Tensor expected_latents(const data::SampleShape& s, int64_t seed, int64_t row) {
  return torch::arange(s.channels * s.frames * s.height * s.width, torch::kFloat)
      .div(1000)
      .add(static_cast<double>(seed + row))
      .view({s.channels, s.frames, s.height, s.width});
}
// text of sample `row`: the first text_len(row) tokens hold seed + row, the rest 0
inline int32_t expected_text_len(const data::SampleShape& s, int64_t row) {
  return static_cast<int32_t>(row % (s.text_len + 1));
}
inline torch::Tensor expected_text(const data::SampleShape& s, int64_t seed, int64_t row) {
  auto t = torch::zeros({s.text_len, s.text_dim});
  t.narrow(0, 0, expected_text_len(s, row)).fill_(static_cast<double>(seed + row));
  return t;
}

// The image-to-video condition of sample `row`, where the shape has one:
// y = -(seed + row) - position / 1000; clip_fea = seed + row + position / 100.
inline torch::Tensor expected_y(const data::SampleShape& s, int64_t seed, int64_t row) {
  return torch::arange(s.condition_channels * s.frames * s.height * s.width, torch::kFloat)
      .div(1000)
      .add(static_cast<double>(seed + row))
      .neg()
      .view({s.condition_channels, s.frames, s.height, s.width});
}
inline torch::Tensor expected_clip(const data::SampleShape& s, int64_t seed, int64_t row) {
  return torch::arange(s.clip_tokens * s.clip_dim, torch::kFloat)
      .div(100)
      .add(static_cast<double>(seed + row))
      .view({s.clip_tokens, s.clip_dim});
}
inline data::SampleCondition expected_condition(const data::SampleShape& s, int64_t seed, int64_t row) {
  data::SampleCondition c;
  if (s.has_condition()) c.y = expected_y(s, seed, row);
  if (s.clip_tokens > 0) c.clip_fea = expected_clip(s, seed, row);
  return c;
}

inline void write_shard(const std::string& path, const data::SampleShape& s, int64_t samples, int64_t seed) {
  data::ShardWriter w(path, s, samples, /*with_prompt=*/true);
  for (int64_t row = 0; row < samples; ++row)
    w.write(row, expected_latents(s, seed, row), expected_text(s, seed, row), expected_text_len(s, row),
            "sample " + std::to_string(seed + row), expected_condition(s, seed, row));
}

// A fresh, empty directory under the test temp dir.
inline std::string fresh_directory(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline data::SampleShape small_shape(data::Stored latents = data::Stored::Float32,
                                     data::Stored text = data::Stored::Float32) {
  data::SampleShape s;
  s.channels = 4;
  s.frames = 2;
  s.height = 3;
  s.width = 5;
  s.text_len = 6;
  s.text_dim = 8;
  s.latents = latents;
  s.text = text;
  return s;
}

// small_shape with an image-to-video condition: y [6, F, H, W], clip_fea [4, 3].
inline data::SampleShape conditioned_shape(data::Stored latents = data::Stored::Float32,
                                           data::Stored text = data::Stored::Float32) {
  data::SampleShape s = small_shape(latents, text);
  s.condition_channels = 6;
  s.clip_tokens = 4;
  s.clip_dim = 3;
  return s;
}

}  // namespace wt::testing
