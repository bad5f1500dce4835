// The memory a Wan VAE's decode takes beyond its weights, for wansample's
// memory plan. The decoder works one latent frame at a time (its causal
// caches carry the rest), so its peak grows with the frame's pixels, not the
// video's length. Measured by `wanbench vae --pass decode` (peak RSS less
// the RSS with the weights loaded; docs/performance.md, "The VAE's decode
// in the sampling plan"), fp32 on the CPU: the largest per output pixel of
// a frame plus 2%, 22.4 KiB for Wan2.1's VAE (at 208x120 and 416x240) and
// 17.6 KiB for Wan2.2's (at 416x224); bf16 is taken as half.
//
// Tiled (vae_tiling.hpp), the decode's peak is one tile's, and it holds the
// decoded tiles (3 fp32 values a pixel, their overlaps included) and the
// joined video beside it.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>

#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"

namespace wt::wan {

double vae_decode_bytes(VaeVersion version, at::ScalarType dtype, int64_t width, int64_t height);

// A tiled decode of a width x height video of `frames` frames.
double vae_tiled_decode_bytes(VaeVersion version, at::ScalarType dtype, const VaeTiling& tiling, int64_t width,
                              int64_t height, int64_t frames);

// The memory a VAE decode may take on `device` beside the VAE's weights (in
// `dtype`, from the header of `vae`'s file): the device's (CUDA) or the
// host's memory, all of it, never what happens to be free, so that a run
// decides the same whenever it runs; infinity when it cannot be read.
double memory_beside_vae(const c10::Device& device, const std::string& vae, at::ScalarType dtype);

// The tiles a decode of width x height pixels runs with under `choice`:
// none for Off, or for a frame no larger than a tile; the given size for
// Tiles; for Auto, diffusers' default tiles (256 pixels, stride 192) when
// the whole frame's decode would take more than `available` bytes.
// SettingError naming `setting` for tiles that do not fit the VAE.
std::optional<VaeTiling> decode_tiling(const VaeTilingChoice& choice, const VideoVaeConfig& vae, at::ScalarType dtype,
                                       int64_t width, int64_t height, double available, const std::string& setting);

}  // namespace wt::wan
