// A PNG a person can open to see sampled latents: one row of frames per
// channel (the first few channels), each channel scaled to its own min..max.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace wt {

// Each entry of `videos` is latents [C, F, H, W]; they are drawn one under
// another (e.g. the sample, then the dataset's own latents), `channels` rows
// each, pixels enlarged `scale` times.
void write_latent_preview(const std::string& path, const std::vector<at::Tensor>& videos, int64_t channels = 4,
                          int64_t scale = 4);

}  // namespace wt
