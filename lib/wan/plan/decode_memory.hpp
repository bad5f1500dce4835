// The memory a Wan VAE's decode takes beyond its weights, for wansample's
// memory plan. The decoder works one latent frame at a time (its causal
// caches carry the rest), so its peak grows with the frame's pixels, not the
// video's length. Measured by `wanbench vae --pass decode` (peak RSS less
// the RSS with the weights loaded; docs/performance.md, "The VAE's decode
// in the sampling plan"), fp32 on the CPU: the largest per output pixel of
// a frame plus 2%, 22.4 KiB for Wan2.1's VAE (at 208x120 and 416x240) and
// 17.6 KiB for Wan2.2's (at 416x224); bf16 is taken as half.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "wantrain/wan/vae/vae_config.hpp"

namespace wt::wan {

double vae_decode_bytes(VaeVersion version, at::ScalarType dtype, int64_t width, int64_t height);

}  // namespace wt::wan
