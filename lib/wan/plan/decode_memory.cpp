#include "wantrain/wan/plan/decode_memory.hpp"

#include <algorithm>
#include <limits>

#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/util/memory.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {
namespace {

// The pixels the tiles along one axis cover together, overlaps counted twice: tiles start every stride.
double covered(int64_t size, int64_t tile, int64_t stride) {
  double pixels = 0;
  for (int64_t start = 0; start < size; start += stride) pixels += double(std::min(tile, size - start));
  return pixels;
}

}  // namespace

double vae_decode_bytes(VaeVersion version, at::ScalarType dtype, int64_t width, int64_t height) {
  const double per_pixel = (version == VaeVersion::Wan22 ? 17.6 : 22.4) * 1024.0;  // fp32
  return per_pixel * double(width) * double(height) * (dtype == at::kFloat ? 1.0 : 0.5);
}

double memory_beside_vae(const c10::Device& device, const std::string& vae, at::ScalarType dtype) {
  const double capacity =
      device.is_cuda() ? distributed::cuda_device_memory_bytes(device.index()) : physical_memory_bytes();
  if (capacity <= 0) return std::numeric_limits<double>::infinity();  // unknown: whole frames, as before tiling
  return capacity - weights_bytes(vae_weights_file(vae), dtype);
}

double vae_tiled_decode_bytes(VaeVersion version, at::ScalarType dtype, const VaeTiling& t, int64_t width,
                              int64_t height, int64_t frames) {
  const double rgb_frame = 3.0 * sizeof(float) * double(frames);
  const double tiles = covered(height, t.tile_height, t.stride_height) * covered(width, t.tile_width, t.stride_width);
  return vae_decode_bytes(version, dtype, std::min(width, t.tile_width), std::min(height, t.tile_height)) +
         rgb_frame * (tiles + double(width) * double(height));
}

std::optional<VaeTiling> decode_tiling(const VaeTilingChoice& choice, const VideoVaeConfig& vae, at::ScalarType dtype,
                                       int64_t width, int64_t height, double available, const std::string& setting) {
  const int64_t f = vae.spatial_factor();
  std::optional<VaeTiling> tiling;
  switch (choice.mode) {
    case VaeTilingChoice::Mode::Off: return std::nullopt;
    case VaeTilingChoice::Mode::Tiles: tiling = VaeTiling::of_tile(choice.width, choice.height, f); break;
    case VaeTilingChoice::Mode::Auto:
      if (vae_decode_bytes(vae.version, dtype, width, height) <= available) return std::nullopt;
      tiling = VaeTiling{};
      break;
  }
  check_tiling(*tiling, f, setting);
  if (width <= tiling->tile_width && height <= tiling->tile_height) return std::nullopt;  // one tile: the whole frame
  return tiling;
}

}  // namespace wt::wan
