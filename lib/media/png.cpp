#include "wantrain/media/png.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <fstream>

#include "wantrain/util/error.hpp"

namespace wt::media {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

// A chunk: length, type, data, CRC-32 of type and data (PNG spec, section 5.3).
void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(out.size() - start));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::string encode_png_gray(int width, int height, const std::vector<uint8_t>& pixels) {
  if (width < 1 || height < 1 || pixels.size() != size_t(width) * size_t(height))
    throw Error(fmt::format("png: {} pixels do not make a {}x{} image", pixels.size(), width, height));
  std::string raw;  // each row: filter type 0 (none), then its bytes
  raw.reserve(size_t(height) * (width + 1));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels.data()) + size_t(y) * width, width);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
    throw Error("png: zlib could not compress the image");
  packed.resize(packed_size);

  std::string header;
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(height));
  header += std::string{8, 0, 0, 0, 0};  // bit depth 8, greyscale, deflate, adaptive filtering, no interlace
  std::string file = "\x89PNG\r\n\x1a\n";
  put_chunk(file, "IHDR", header);
  put_chunk(file, "IDAT", packed);
  put_chunk(file, "IEND", "");
  return file;
}

void write_png_gray(const std::string& path, int width, int height, const std::vector<uint8_t>& pixels) {
  const std::string file = encode_png_gray(width, height, pixels);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(file.data(), std::streamsize(file.size()));
  if (!out.flush()) throw Error(fmt::format("png {}: cannot write the file", path));
}

}  // namespace wt::media
