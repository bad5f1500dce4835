// Tiled VAE encode and decode over the spatial axes, as diffusers'
// AutoencoderKLWan.enable_tiling does (its tiled_encode and tiled_decode):
// the frame is cut into overlapping tiles, each tile goes through the whole
// causal pass over time on its own, and the overlaps are blended linearly,
// top to bottom and left to right, each tile with its neighbours as already
// blended; then the tiles are cut to the stride and joined. Peak memory
// follows the tile's pixels instead of the frame's, for the decoded tiles'
// few bytes a pixel (docs/model.md, "Tiled encode and decode").
//
// Sizes are diffusers': a tile of tile_height x tile_width and a stride
// between tiles, in pixels (Wan2.2's VAE encodes 2x2 patches: its encode
// tiles are twice that in pixels, as diffusers tiles its patched input).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

namespace wt::wan {

class VideoVae;

struct VaeTiling {
  int64_t tile_height = 256, tile_width = 256;      // diffusers' tile_sample_min_height, _width
  int64_t stride_height = 192, stride_width = 192;  // diffusers' tile_sample_stride_height, _width
  // A tile of W x H pixels and the stride that keeps diffusers' overlap, a
  // quarter of the tile (256 -> 192), in whole multiples of `factor` (the
  // VAE's spatial factor).
  static VaeTiling of_tile(int64_t width, int64_t height, int64_t factor);
  // "tiles of 256x256 pixels, stride 192x192"; `scale` 2 for Wan2.2's encode, whose tiles count 2x2 patches.
  std::string describe(int64_t scale = 1) const;
};

// What a tool's --vae-tiling asks: auto (tiles of the default size when the
// memory plan says the whole frame does not fit: plan/decode_memory.hpp),
// off, or tiles of width x height pixels.
struct VaeTilingChoice {
  enum class Mode { Auto, Off, Tiles } mode = Mode::Auto;
  int64_t width = 0, height = 0;  // Tiles
  // The setting's text: "auto", "off" or WIDTHxHEIGHT ("512x512");
  // SettingError naming the vae_tiling setting for any other.
  static VaeTilingChoice parse(const std::string& text);
};

// Whether `vae` tiles a video of height x width pixels to encode it, and
// latents of h x w to decode them (diffusers' rule: larger than a tile).
bool encode_is_tiled(const VideoVae& vae, const VaeTiling& tiling, int64_t height, int64_t width);
bool decode_is_tiled(const VideoVae& vae, const VaeTiling& tiling, int64_t height, int64_t width);

// SettingError naming `setting` unless `tiling` fits a VAE of
// `spatial_factor` pixels a latent: strides of at least one latent and at
// most the tile, tiles and strides whole numbers of latents (8 pixels for
// Wan2.1's VAE, 16 for Wan2.2's).
void check_tiling(const VaeTiling& tiling, int64_t spatial_factor, const std::string& setting);

// VideoVae::encode and decode through tiles (video_vae.hpp has their
// contracts; the decode is not clamped here, VideoVae::decode clamps). The
// decode's video is in host memory.
at::Tensor tiled_encode(VideoVae& vae, const at::Tensor& video, const VaeTiling& tiling);
void tiled_decode(VideoVae& vae, const at::Tensor& latents, const VaeTiling& tiling,
                  const std::function<void(const at::Tensor& frames)>& sink);

}  // namespace wt::wan
