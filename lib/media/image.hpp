// An 8-bit picture in memory, as the media layer hands it around: RGB
// (3 bytes a pixel) or greyscale (1), rows top first, no padding.
#pragma once

#include <cstdint>
#include <vector>

namespace wt::media {

struct Image {
  int width = 0, height = 0, channels = 3;
  std::vector<uint8_t> pixels;  // height * width * channels

  Image() = default;
  Image(int w, int h, int c = 3) : width(w), height(h), channels(c), pixels(size_t(w) * size_t(h) * size_t(c)) {}
  uint8_t* row(int y) { return pixels.data() + size_t(y) * size_t(width) * size_t(channels); }
  const uint8_t* row(int y) const { return pixels.data() + size_t(y) * size_t(width) * size_t(channels); }
};

}  // namespace wt::media
