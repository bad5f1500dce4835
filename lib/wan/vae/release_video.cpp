#include "wantrain/wan/vae/release_video.hpp"

#include <fmt/format.h>

namespace wt::wan {

ReleaseVideo release_video(const VideoVaeConfig& vae) {
  ReleaseVideo v;
  v.size_multiple = 2 * vae.spatial_factor();
  if (vae.version == VaeVersion::Wan22) {
    v.width = 1280, v.height = 704, v.frames = 121, v.fps = 24;
  } else {
    v.width = 832, v.height = 480, v.frames = 81, v.fps = 16;
  }
  return v;
}

std::string ReleaseVideo::size_text() const { return fmt::format("{}x{}", width, height); }

}  // namespace wt::wan
