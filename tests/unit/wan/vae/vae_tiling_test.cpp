// The VAE's tiles (vae_tiling.hpp): --vae-tiling's text, the sizes each VAE
// takes, when auto tiles, what the plan counts, and that a frame within one
// tile is the whole-frame pass bit for bit. That tiles equal diffusers'
// enable_tiling is DiffusersPeer.Wan21VaeFolder... and Wan22VaeFolder...
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/plan/decode_memory.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace vae_tiling_test {
namespace {

using wt::wan::VaeTiling;
using wt::wan::VaeTilingChoice;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

wt::wan::VideoVaeConfig small_vae() {
  return wt::wan::parse_video_vae_config(R"({"dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1,
      "temperal_downsample": [false, true, true], "latents_mean": [0.1, -0.2, 0.3, 0.0],
      "latents_std": [1.5, 0.5, 2.0, 1.0]})",
                                         "small");
}

}  // namespace

TEST(VaeTiling, TheSettingsTextIsAutoOffOrATileSize) {
  EXPECT_EQ(VaeTilingChoice::parse("auto").mode, VaeTilingChoice::Mode::Auto);
  EXPECT_EQ(VaeTilingChoice::parse("off").mode, VaeTilingChoice::Mode::Off);
  const auto tiles = VaeTilingChoice::parse("512x384");
  EXPECT_EQ(tiles.mode, VaeTilingChoice::Mode::Tiles);
  EXPECT_EQ(tiles.width, 512);
  EXPECT_EQ(tiles.height, 384);
  for (const char* bad : {"", "on", "512", "512x", "x512", "0x256", "-256x256", "256x256x4", "1e3x256"})
    EXPECT_NE(error_of([&] { VaeTilingChoice::parse(bad); }).find("vae_tiling: '" + std::string(bad) + "': expected"),
              std::string::npos)
        << bad;
}

TEST(VaeTiling, ATileKeepsDiffusersQuarterOverlapInWholeLatents) {
  const auto t = VaeTiling::of_tile(256, 256, 8);  // diffusers' defaults
  EXPECT_EQ(t.stride_width, 192);
  EXPECT_EQ(t.stride_height, 192);
  const auto wide = VaeTiling::of_tile(320, 128, 16);  // a quarter of 320 is 80, of 128 is 32: multiples of 16
  EXPECT_EQ(wide.stride_width, 240);
  EXPECT_EQ(wide.stride_height, 96);
  EXPECT_EQ(VaeTiling::of_tile(32, 32, 16).stride_width, 16);  // at least one latent of overlap
  EXPECT_EQ(t.describe(), "tiles of 256x256 pixels, stride 192x192");
  EXPECT_NE(error_of([] { wt::wan::check_tiling(VaeTiling::of_tile(100, 256, 8), 8, "vae_tiling"); })
                .find("vae_tiling: tiles of 100x256 pixels, stride 76x192: this VAE needs strides of at least 8 "
                      "pixels and at most the tile, each a multiple of 8 (so tiles of 16 or more)"),
            std::string::npos);
  EXPECT_EQ(error_of([] { wt::wan::check_tiling(VaeTiling::of_tile(96, 256, 8), 8, "vae_tiling"); }), "(no error)");
}

TEST(VaeTiling, AutoTilesOnlyWhatDoesNotFit) {
  const auto vae = small_vae();
  const double whole_720p = wt::wan::vae_decode_bytes(vae.version, at::kFloat, 1280, 720);
  auto tiling = [&](const VaeTilingChoice& choice, int64_t w, int64_t h, double available) {
    return wt::wan::decode_tiling(choice, vae, at::kFloat, w, h, available, "vae_tiling");
  };
  EXPECT_FALSE(tiling({}, 1280, 720, whole_720p * 1.01));
  const auto tiled = tiling({}, 1280, 720, whole_720p * 0.99);
  ASSERT_TRUE(tiled);
  EXPECT_EQ(tiled->tile_width, 256);
  EXPECT_FALSE(tiling({VaeTilingChoice::Mode::Off, 0, 0}, 1280, 720, 0));
  EXPECT_FALSE(tiling({VaeTilingChoice::Mode::Tiles, 512, 512}, 512, 480, 0));  // one tile holds the frame
  EXPECT_TRUE(tiling({VaeTilingChoice::Mode::Tiles, 512, 512}, 832, 480, 1e30));
  // The plan: one tile's decode and the video's pixels (the tiles and the joined video), far below the whole
  // frame's decode at 720p x 81.
  const double tiled_bytes = wt::wan::vae_tiled_decode_bytes(vae.version, at::kFloat, *tiled, 1280, 720, 81);
  const double one_tile = wt::wan::vae_decode_bytes(vae.version, at::kFloat, 256, 256);
  // 7 x 4 tiles (six of 256 and one of 128 across, three of 256 and one of 144 down) cover 1664 x 912 pixels
  // with their overlaps; 3 fp32 values a pixel, 81 frames.
  EXPECT_DOUBLE_EQ(tiled_bytes, one_tile + 3.0 * 4 * 81 * (1664.0 * 912 + 1280.0 * 720));
  EXPECT_LT(tiled_bytes, whole_720p / 3);
}

TEST(VaeTiling, AFrameWithinOneTileIsTheWholeFramePassBitForBit) {
  torch::manual_seed(3);
  const auto vae = wt::wan::make_video_vae(small_vae());
  torch::NoGradGuard no_grad;
  const auto video = torch::rand({1, 3, 5, 24, 32}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 2, 3, 4});
  const auto encoded = vae->encode(video), decoded = vae->decode(latents);
  vae->set_tiling(VaeTiling::of_tile(32, 32, 8));
  EXPECT_TRUE(torch::equal(vae->encode(video), encoded));
  EXPECT_TRUE(torch::equal(vae->decode(latents), decoded));
  // Smaller tiles do tile, and the result keeps the shapes and the clamp.
  vae->set_tiling(VaeTiling::of_tile(16, 16, 8));
  const auto tiled = vae->decode(latents);
  EXPECT_EQ(tiled.sizes(), decoded.sizes());
  EXPECT_LE(tiled.abs().max().item<double>(), 1.0);
  EXPECT_FALSE(torch::equal(tiled, decoded));
  EXPECT_EQ(vae->encode(video).sizes(), encoded.sizes());
}

}  // namespace vae_tiling_test
