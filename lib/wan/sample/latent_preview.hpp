// A picture a person can look at of sampled latents: one row of frames per
// channel (the few channels that vary most in the last video), grey levels
// spanning the channel's min..max in the last video (the reference, when
// there is one) for every video, so that the sample's rows compare with the
// reference's in level and contrast; values outside that range clip.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::wan {

struct LatentPreview {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;    // grey, height rows of width bytes
  std::vector<int64_t> channels;  // the channels shown, in order
  std::string png() const;        // encoded as a PNG file
};

// Each entry of `videos` is latents [C, F, H, W]; they are drawn one under
// another (e.g. the sample, then the dataset's own latents), `channels` rows
// each, pixels enlarged `scale` times.
LatentPreview latent_preview(const std::vector<at::Tensor>& videos, int64_t channels = 4, int64_t scale = 4);

// The preview written to `path` as a PNG; returns the channels shown.
std::vector<int64_t> write_latent_preview(const std::string& path, const std::vector<at::Tensor>& videos,
                                          int64_t channels = 4, int64_t scale = 4);

}  // namespace wt::wan
