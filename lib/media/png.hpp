// A minimal PNG writer: 8-bit greyscale, zlib-compressed, for previews.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt::media {

// pixels: height rows of width bytes, top row first; the PNG file's bytes.
std::string encode_png_gray(int width, int height, const std::vector<uint8_t>& pixels);

// The same, written to `path`. Error naming the file when it cannot be written.
void write_png_gray(const std::string& path, int width, int height, const std::vector<uint8_t>& pixels);

}  // namespace wt::media
