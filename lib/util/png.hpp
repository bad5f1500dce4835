// A minimal PNG writer: 8-bit greyscale, zlib-compressed, for previews.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt {

// pixels: height rows of width bytes, top row first. Error naming the file
// when it cannot be written.
void write_png_gray(const std::string& path, int width, int height, const std::vector<uint8_t>& pixels);

}  // namespace wt
