#include "wantrain/wan/vae/vae_tiling.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {
namespace {

using Tiles = std::vector<std::vector<at::Tensor>>;  // rows of tiles, top to bottom, each left to right

// Blends the end of `before` (the tile above, or to the left) into the start
// of `tile` along `dim` (3: height, 4: width), in place, as diffusers'
// blend_v and blend_h: over e steps of `unit` pixels (Wan2.2's decode blends
// its 2x2 patches), step y of the tile becomes before's matching step times
// 1 - y/e plus its own times y/e.
void blend(const at::Tensor& before, at::Tensor& tile, int64_t dim, int64_t steps, int64_t unit) {
  const int64_t e = std::min({before.size(dim) / unit, tile.size(dim) / unit, steps});
  if (e <= 0) return;
  std::vector<float> keep(size_t(e * unit)), take(size_t(e * unit));
  for (int64_t p = 0; p < e * unit; ++p) {
    const double y = double(p / unit) / double(e);
    keep[size_t(p)] = float(y);  // diffusers' y / e and 1 - y / e, each rounded once
    take[size_t(p)] = float(1 - y);
  }
  std::vector<int64_t> shape(size_t(tile.dim()), 1);
  shape[size_t(dim)] = e * unit;
  const auto options = tile.options();
  const auto own = torch::tensor(keep, options.dtype(torch::kFloat)).view(shape).to(options);
  const auto theirs = torch::tensor(take, options.dtype(torch::kFloat)).view(shape).to(options);
  auto start = tile.narrow(dim, 0, e * unit);
  start.copy_(before.narrow(dim, before.size(dim) - e * unit, e * unit) * theirs + start * own);
}

// diffusers' joining: each tile blended with the one above and the one to
// its left (both as already blended), cut to the stride and put in its
// place; the whole cut to height x width. Written into one output, a row of
// tiles dropped once the row below is blended with it.
at::Tensor join(Tiles& rows, int64_t blend_height, int64_t blend_width, int64_t unit, int64_t stride_height,
                int64_t stride_width, int64_t height, int64_t width) {
  auto sizes = rows[0][0].sizes().vec();
  sizes[3] = height, sizes[4] = width;
  auto whole = at::empty(sizes, rows[0][0].options());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < rows[i].size(); ++j) {
      auto& tile = rows[i][j];
      if (i > 0) blend(rows[i - 1][j], tile, 3, blend_height, unit);
      if (j > 0) blend(rows[i][j - 1], tile, 4, blend_width, unit);
      const int64_t top = int64_t(i) * stride_height, left = int64_t(j) * stride_width;
      if (top >= height || left >= width) continue;
      const int64_t h = std::min({stride_height, tile.size(3), height - top}),
                    w = std::min({stride_width, tile.size(4), width - left});
      whole.narrow(3, top, h).narrow(4, left, w).copy_(tile.narrow(3, 0, h).narrow(4, 0, w));
    }
    if (i > 0) rows[i - 1].clear();
  }
  return whole;
}

}  // namespace

VaeTilingChoice VaeTilingChoice::parse(const std::string& text) {
  if (text == "auto") return {};
  if (text == "off") return {Mode::Off, 0, 0};
  const auto x = text.find('x');
  auto number = [](const std::string& digits) -> int64_t {
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
    return std::stoll(digits);
  };
  const int64_t width = x == std::string::npos ? 0 : number(text.substr(0, x)),
                height = x == std::string::npos ? 0 : number(text.substr(x + 1));
  if (width < 1 || height < 1)
    throw SettingError("vae_tiling", fmt::format("'{}': expected auto, off, or the tile's WIDTHxHEIGHT in pixels "
                                                 "(e.g. 256x256)",
                                                 text));
  return {Mode::Tiles, width, height};
}

VaeTiling VaeTiling::of_tile(int64_t width, int64_t height, int64_t factor) {
  auto stride = [&](int64_t tile) { return tile - std::max(factor, tile / 4 / factor * factor); };
  return VaeTiling{height, width, stride(height), stride(width)};
}

std::string VaeTiling::describe(int64_t scale) const {
  return fmt::format("tiles of {}x{} pixels, stride {}x{}", scale * tile_width, scale * tile_height,
                     scale * stride_width, scale * stride_height);
}

bool encode_is_tiled(const VideoVae&, const VaeTiling& t, int64_t height, int64_t width) {
  // diffusers compares the frame's pixels with the tile, before the patches (which its tiles then count).
  return width > t.tile_width || height > t.tile_height;
}

bool decode_is_tiled(const VideoVae& vae, const VaeTiling& t, int64_t height, int64_t width) {
  return width > t.tile_width / vae.spatial_factor() || height > t.tile_height / vae.spatial_factor();
}

void check_tiling(const VaeTiling& t, int64_t f, const std::string& setting) {
  for (const auto& [tile, stride] : {std::pair{t.tile_width, t.stride_width}, {t.tile_height, t.stride_height}})
    if (tile < f || stride < f || stride > tile || tile % f != 0 || stride % f != 0)
      throw SettingError(setting, fmt::format("{}: this VAE needs strides of at least {} pixels and at most the "
                                              "tile, each a multiple of {} (so tiles of {} or more)",
                                              t.describe(), f, f, 2 * f));
}

at::Tensor tiled_encode(VideoVae& vae, const at::Tensor& video, const VaeTiling& t) {
  const int64_t s = vae.spatial_factor(), p = vae.patch_size();
  const int64_t height = video.size(3), width = video.size(4);
  // diffusers tiles the patched frame: in pixels, p times its sizes.
  const int64_t tile_h = t.tile_height * p, tile_w = t.tile_width * p;
  const int64_t stride_h = t.stride_height * p, stride_w = t.stride_width * p;
  Tiles rows;
  for (int64_t i = 0; i < height; i += stride_h) {
    rows.emplace_back();
    for (int64_t j = 0; j < width; j += stride_w)
      rows.back().push_back(
          vae.encode_whole(video.narrow(3, i, std::min(tile_h, height - i)).narrow(4, j, std::min(tile_w, width - j))));
  }
  return join(rows, (tile_h - stride_h) / s, (tile_w - stride_w) / s, 1, stride_h / s, stride_w / s, height / s,
              width / s);
}

void tiled_decode(VideoVae& vae, const at::Tensor& latents, const VaeTiling& t,
                  const std::function<void(const at::Tensor& frames)>& sink) {
  const int64_t s = vae.spatial_factor(), p = vae.patch_size();
  const int64_t height = latents.size(3), width = latents.size(4);
  const int64_t tile_h = t.tile_height / s, tile_w = t.tile_width / s;
  const int64_t stride_h = t.stride_height / s, stride_w = t.stride_width / s;
  Tiles rows;
  for (int64_t i = 0; i < height; i += stride_h) {
    rows.emplace_back();
    for (int64_t j = 0; j < width; j += stride_w) {
      std::vector<at::Tensor> chunks;
      // On a GPU the decoded tiles wait in host memory: the device holds one tile's decode (blending is exact
      // arithmetic, the same on either).
      vae.decode_whole(latents.narrow(3, i, std::min(tile_h, height - i)).narrow(4, j, std::min(tile_w, width - j)),
                       [&](const at::Tensor& frames) { chunks.push_back(frames.to(at::kCPU)); });
      rows.back().push_back(torch::cat(chunks, 2));  // [B, 3, F, tile pixels]
      chunks.clear();
    }
  }
  // Blended over diffusers' patched pixels: steps of p pixels.
  const auto video = join(rows, (t.tile_height - t.stride_height) / p, (t.tile_width - t.stride_width) / p, p,
                          t.stride_height, t.stride_width, height * s, width * s);
  rows.clear();
  for (int64_t first = 0; first < video.size(2); first += first == 0 ? 1 : vae.temporal_factor())
    sink(video.narrow(2, first, first == 0 ? 1 : std::min(vae.temporal_factor(), video.size(2) - first)));
}

}  // namespace wt::wan
