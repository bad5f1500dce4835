// The video that each VAE's released models are made for, which wandata
// encode and wansample take as their defaults, so that a user who names a
// VAE gets the release's shape without spelling it out:
//   Wan2.1's VAE (Wan2.1 T2V/I2V 1.3B and 14B, Wan2.2's A14B experts):
//     832x480 (480p), 81 frames at 16 fps;
//   Wan2.2's VAE (TI2V-5B, the only model of it): 1280x704, 121 frames at
//     24 fps (Wan2.2's wan/configs/wan_ti2v_5B.py and SUPPORTED_SIZES).
// Sides are multiples of size_multiple: the VAE's spatial stride, then the
// DiT's 2x2 patches (16 for Wan2.1's, 32 for Wan2.2's).
#pragma once

#include <cstdint>
#include <string>

#include "wantrain/wan/vae/vae_config.hpp"

namespace wt::wan {

struct ReleaseVideo {
  int64_t width = 0, height = 0, frames = 0;
  double fps = 0;
  int64_t size_multiple = 0;
  std::string size_text() const;  // "1280x704": WIDTHxHEIGHT, as --size takes it
};

ReleaseVideo release_video(const VideoVaeConfig& vae);

}  // namespace wt::wan
