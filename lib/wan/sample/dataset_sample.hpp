// One dataset sample as sampling starts from it (wansample --data, the
// training sample drawn during training): its latents (what a sample is
// compared with), text embedding and an image-to-video sample's condition,
// in fp32, read at its bucket's shape.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wantrain/data/dataset.hpp"
#include "wantrain/wan/model/wan_model.hpp"

namespace wt::wan {

struct DatasetSample {
  at::Tensor latents;  // [C, F, H, W]
  at::Tensor context;  // [L, D]
  int32_t text_len = 0;
  ModelCondition image;  // [1, ...]: the sample's own first (and last) frame's condition, as trained
  std::string prompt;    // its caption, when the dataset keeps them
};

// `index` must be one of the dataset's samples (the caller says which option
// names it when not).
DatasetSample read_dataset_sample(const data::Dataset& dataset, int64_t index);

// The samples whose prompt is sample `index`'s, of its shape, `index`
// among them, in order: the videos of one prompt (`wandata synth --modes`).
// Just `index` when the dataset keeps no prompts. Reads every sample's
// prompt, none of their tensors.
std::vector<int64_t> videos_of_prompt(const data::Dataset& dataset, int64_t index);

}  // namespace wt::wan
