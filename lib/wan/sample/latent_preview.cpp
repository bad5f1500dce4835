#include "wantrain/wan/sample/latent_preview.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/media/video_writer.hpp"

namespace wt::wan {

LatentPreview latent_preview(const std::vector<at::Tensor>& videos, int64_t channels, int64_t scale) {
  constexpr int64_t kGap = 2;  // background pixels between tiles
  const auto& first = videos.front();
  const int64_t c = std::min(channels, first.size(0)), frames = first.size(1);
  const int64_t tile_h = first.size(2) * scale, tile_w = first.size(3) * scale;
  const int64_t rows = c * int64_t(videos.size());
  const int64_t width = frames * (tile_w + kGap) + kGap, height = rows * (tile_h + kGap) + kGap;
  auto image = torch::full({height, width}, 32, torch::kUInt8);  // dark grey background
  const auto range_of = videos.back().to(torch::kFloat32);       // [C, F, H, W]
  // The channels that vary most: a flat channel shows nothing but noise.
  const auto by_spread = range_of.flatten(1).std(1).argsort(0, /*descending=*/true);  // [C]
  std::vector<int64_t> shown(c);
  for (int64_t i = 0; i < c; ++i) shown[i] = by_spread[i].item<int64_t>();
  int64_t row = 0;
  for (const auto& video : videos) {
    auto v = video.to(torch::kFloat32);
    for (const int64_t ch : shown) {
      auto channel = v[ch];  // [F, H, W]
      const float lo = range_of[ch].min().item<float>(), hi = range_of[ch].max().item<float>();
      auto pixels = ((channel - lo) / std::max(hi - lo, 1e-6f) * 255.0f).round().clamp(0, 255).to(torch::kUInt8);
      pixels = pixels.repeat_interleave(scale, 1).repeat_interleave(scale, 2);  // [F, H*scale, W*scale]
      for (int64_t f = 0; f < frames; ++f) {
        const int64_t y = kGap + row * (tile_h + kGap), x = kGap + f * (tile_w + kGap);
        image.slice(0, y, y + tile_h).slice(1, x, x + tile_w).copy_(pixels[f]);
      }
      ++row;
    }
  }
  image = image.contiguous();
  const auto* data = image.data_ptr<uint8_t>();
  return {int(width), int(height), std::vector<uint8_t>(data, data + image.numel()), shown};
}

namespace {
media::Image grey(const LatentPreview& preview) {
  media::Image image(preview.width, preview.height, 1);
  image.pixels = preview.pixels;
  return image;
}
}  // namespace

std::string LatentPreview::png() const { return media::encode_png(grey(*this)); }

std::vector<int64_t> write_latent_preview(const std::string& path, const std::vector<at::Tensor>& videos,
                                          int64_t channels, int64_t scale) {
  const auto preview = latent_preview(videos, channels, scale);
  media::write_png(path, grey(preview));
  return preview.channels;
}

}  // namespace wt::wan
