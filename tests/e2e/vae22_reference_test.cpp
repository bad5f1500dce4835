// The Wan2.2 video VAE (wan/vae/wan22_vae) against tests/reference/vae22_reference.py:
// an independent PyTorch evaluation of the official wan/modules/vae2_2.py
// (WanVAE_ in its Wan2_2_VAE wrapper), run by the torch wheel's PyTorch on the
// same weights (random, in the official names) and the same video and
// latents; and the factory (wan/vae/video_vae) that tells Wan2.1's VAE from
// Wan2.2's by the tensors of a weights file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/video_vae.hpp"
#include "wantrain/wan/vae/wan22_vae.hpp"
#include "wantrain/wan/vae/wan_vae.hpp"

// Its own namespace: the unity build compiles it with the other e2e tests,
// whose helpers have the same names.
namespace vae22_reference {

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// Weights that make every part matter and keep activations of order 1, as
// vae_reference_test.cpp draws them: gamma around 1, convs at unit gain,
// small biases, the attention's output projection drawn too, the decoder's
// last conv at 0.3 so that few decoded values reach the clamp.
void randomize(torch::nn::Module& vae, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : vae.named_parameters()) {
    auto& p = item.value();
    if (ends_with(item.key(), ".gamma")) {
      p.copy_(1 + 0.3 * torch::randn_like(p));
    } else if (ends_with(item.key(), ".bias")) {
      p.copy_(0.1 * torch::randn_like(p));
    } else {
      const double gain = item.key() == "decoder.head.2.weight" ? 0.3 : 1.0;
      p.copy_(torch::randn_like(p) * (gain / std::sqrt(double(p.numel() / p.size(0)))));
    }
  }
}

wt::io::NamedTensors state_dict(const torch::nn::Module& vae) {
  wt::io::NamedTensors weights;
  for (const auto& item : vae.named_parameters()) weights.emplace_back(item.key(), item.value());
  return weights;
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

std::string python_reference(const std::string& args) {
  return std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/vae22_reference.py " + args;
}

struct Reference {
  at::Tensor latents, decoded;
};

Reference run_reference(const std::string& dir, const std::string& config_json, const torch::nn::Module& vae,
                        const at::Tensor& video, const at::Tensor& latents) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  wt::io::write_safetensors(dir + "/weights.safetensors", state_dict(vae), torch::kFloat32);
  wt::io::write_safetensors(dir + "/inputs.safetensors", {{"video", video}, {"latents", latents}}, torch::kFloat32);
  const auto job = wt::testing::launch(python_reference(dir + "/config.json " + dir + "/weights.safetensors " + dir +
                                                        "/inputs.safetensors " + dir + "/out.safetensors"));
  EXPECT_EQ(job.status, 0) << job.output;
  if (job.status != 0) return {};
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  return {file.read(*file.find("latents")), file.read(*file.find("decoded"))};
}

// As vae_reference_test.cpp bounds Wan2.1's: both in fp32, the sums in
// another order; 1e-4 of the scale is far above that and far below any
// semantic slip (a patch channel or a shortcut group off by one, a cache
// frame missing: errors of order 1).
constexpr double kTolerance = 1e-4;

void expect_matches_reference(const char* name, const char* config_json, int64_t batch, int64_t frames, int64_t height,
                              int64_t width) {
  SCOPED_TRACE(name);
  const std::string dir = wt::testing::fresh(std::string("vae22-reference-") + name);
  const auto config = wt::wan::parse_vae22_config(config_json, name);
  wt::wan::Wan22Vae vae(config);
  randomize(*vae, 21);
  const int64_t f = config.spatial_factor();
  const auto video = torch::rand({batch, 3, frames, height, width}) * 2 - 1;
  const auto latents = torch::randn({batch, config.z_dim, vae->latent_frames(frames), height / f, width / f});
  const auto reference = run_reference(dir, config_json, *vae, video, latents);
  ASSERT_TRUE(reference.latents.defined());

  const auto encoded = vae->encode(video);
  ASSERT_EQ(encoded.sizes(), reference.latents.sizes());
  EXPECT_EQ(encoded.scalar_type(), torch::kFloat);
  const double scale = max_abs(reference.latents), error = max_abs(encoded - reference.latents);
  EXPECT_GT(scale, 0.5);
  EXPECT_LT(error, kTolerance * scale) << "encode: max |ours - reference| = " << error << " of " << scale;

  const auto decoded = vae->decode(latents);
  ASSERT_EQ(decoded.sizes(), reference.decoded.sizes());
  const double decoded_error = max_abs(decoded - reference.decoded);
  const double clamped = (reference.decoded.abs() == 1).to(torch::kFloat).mean().item<double>();
  EXPECT_LT(clamped, 0.1);
  EXPECT_GT(max_abs(reference.decoded), 0.3);
  EXPECT_LT(decoded_error, kTolerance) << "decode: max |ours - reference| = " << decoded_error;
  std::cout << "[ measured ] " << name << ": encode " << error / scale << " of scale " << scale << ", decode "
            << decoded_error << " (" << 100 * clamped << "% clamped)\n";
}

// Four levels, time halved by the last two as in the release (so that level
// 0 halves space alone and the last neither, its shortcut the identity);
// latent statistics of its own (z_dim 4); a decoder of another width.
constexpr const char* kSmall = R"({"version": "2.2", "dim": 8, "dec_dim": 12, "z_dim": 4, "dim_mult": [1, 2, 2, 2],
  "num_res_blocks": 1, "temperal_downsample": [false, true, true], "latents_mean": [0.1, -0.2, 0.3, 0.0],
  "latents_std": [1.5, 0.5, 2.0, 1.0]})";

// The same, as Wan2.1's VAE: what the factory must tell apart.
constexpr const char* kSmall21 = R"({"dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1,
  "temperal_downsample": [false, true, true]})";

}  // namespace

// 9 frames: the first alone, then two chunks of 4 that see the cache; the
// decoder's first frame (its shortcuts cut) and two that are not.
TEST(Vae22Reference, NineFramesEncodeAndDecodeAsTheReference) {
  expect_matches_reference("small", kSmall, 1, 9, 32, 48);
}

// Time halved by the first two levels, not the third (the first level
// averages over time on the patches; the decoder's last two resamples double
// time), and a decoder level that halves its width while doubling time, so
// that its shortcut's two frames differ (the release's repeat each channel
// over time: which frame the first latent frame keeps shows only here); two
// residual blocks a level, Wan2.2's 48 channels and statistics, a batch of 2.
TEST(Vae22Reference, OtherLevelsAndWan22sStatisticsAsTheReference) {
  expect_matches_reference("levels", R"({"dim": 8, "dec_dim": 8, "z_dim": 48, "dim_mult": [1, 1, 2, 2],
    "num_res_blocks": 2, "temperal_downsample": [true, true, false]})",
                           2, 9, 16, 32);
}

// Decoding chunk by chunk hands out exactly the frames decode returns; the
// first 5 frames encode to the first 2 latent frames of all 9, and the first
// 2 latent frames decode to the first 5 frames of all 3.
TEST(Vae22Reference, ChunksAreCausalAndStreamAsAWhole) {
  const auto config = wt::wan::parse_vae22_config(kSmall, "small");
  wt::wan::Wan22Vae vae(config);
  randomize(*vae, 22);
  const auto video = torch::rand({1, 3, 9, 32, 32}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 3, 2, 3});

  const auto whole = vae->decode(latents);
  ASSERT_EQ(whole.sizes(), (std::vector<int64_t>{1, 3, 9, 32, 48}));
  std::vector<at::Tensor> chunks;
  vae->decode(latents, [&](const at::Tensor& frames) { chunks.push_back(frames.clone()); });
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].size(2), 1);
  EXPECT_EQ(chunks[1].size(2), 4);
  EXPECT_TRUE(torch::equal(torch::cat(chunks, 2), whole));

  const auto encoded = vae->encode(video);
  ASSERT_EQ(encoded.sizes(), (std::vector<int64_t>{1, 4, 3, 2, 2}));
  const auto first = vae->encode(video.narrow(2, 0, 5));
  EXPECT_LE(max_abs(first - encoded.narrow(2, 0, 2)), 1e-5 * max_abs(encoded));
  const auto start = vae->decode(latents.narrow(2, 0, 2));
  EXPECT_LE(max_abs(start - whole.narrow(2, 0, 5)), 1e-5);
}

// bf16 weights stay bf16 and the VAE computes in bf16, following the fp32
// VAE that holds the same values.
TEST(Vae22Reference, Bf16WeightsStayBf16AndFollowTheFp32Vae) {
  const auto config = wt::wan::parse_vae22_config(kSmall, "small");
  wt::wan::Wan22Vae fp32(config), bf16(config, torch::kBFloat16);
  randomize(*fp32, 23);
  torch::NoGradGuard no_grad;
  auto fp32_params = fp32->named_parameters();
  for (auto& item : bf16->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
    item.value().copy_(fp32_params[item.key()]);
    fp32_params[item.key()].copy_(item.value());
  }
  const auto video = torch::rand({1, 3, 9, 32, 48}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 3, 2, 3});
  const auto relative = [](const at::Tensor& got, const at::Tensor& want) {
    return ((got - want).norm() / want.norm()).item<double>();
  };
  const auto encoded = bf16->encode(video);
  EXPECT_EQ(encoded.scalar_type(), torch::kFloat);
  const double encode_error = relative(encoded, fp32->encode(video));
  const double decode_error = relative(bf16->decode(latents), fp32->decode(latents));
  EXPECT_LT(encode_error, 0.06);
  EXPECT_LT(decode_error, 0.05);
  std::cout << "[ measured ] bf16 against fp32: encode " << encode_error << ", decode " << decode_error << "\n";
}

// The official layout to the tensor: every name and shape the reference
// lays out for the released shape (no weights made: that VAE is 0.7 G
// values), and the same names made by the module for a small shape.
TEST(Vae22Config, TheDefaultIsWan22sVaeToTheTensor) {
  const wt::wan::Vae22Config wan22;
  EXPECT_EQ(wan22.dim, 160);
  EXPECT_EQ(wan22.dec_dim, 256);
  EXPECT_EQ(wan22.z_dim, 48);
  EXPECT_EQ(wan22.spatial_factor(), 16);
  EXPECT_EQ(wan22.temporal_factor(), 4);
  EXPECT_DOUBLE_EQ(wan22.latents_mean[19], 0.5109);
  EXPECT_DOUBLE_EQ(wan22.latents_std[47], 0.7744);
  EXPECT_EQ(wan22.latents_mean.size(), 48u);
  EXPECT_EQ(wan22.latents_std.size(), 48u);

  const std::string dir = wt::testing::fresh("vae22-shapes");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/small.json") << kSmall;
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " -c \"import sys, json; sys.path.insert(0, '" + WANTRAIN_SOURCE_DIR +
      "/tests/reference'); import vae22_reference as r; "
      "small = r.load_config('" +
      dir + "/small.json'); print(json.dumps([r.parameter_shapes(r.DEFAULTS), r.parameter_shapes(small)]))\"");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto both = nlohmann::json::parse(job.output);
  int64_t values = 0;
  for (const auto& [name, shape] : both[0].items()) {
    int64_t n = 1;
    for (const auto& d : shape) n *= d.get<int64_t>();
    values += n;
  }
  std::cout << "[ measured ] the released shape: " << both[0].size() << " tensors, " << values << " values\n";
  // Encoder: conv1 12 -> 160, levels of 2 residual blocks, three resamples.
  EXPECT_EQ(both[0]["encoder.conv1.weight"].get<std::vector<int64_t>>(), (std::vector<int64_t>{160, 12, 3, 3, 3}));
  EXPECT_EQ(both[0]["decoder.head.2.weight"].get<std::vector<int64_t>>(), (std::vector<int64_t>{12, 256, 3, 3, 3}));
  EXPECT_EQ(both[0]["decoder.upsamples.0.upsamples.3.time_conv.weight"].get<std::vector<int64_t>>(),
            (std::vector<int64_t>{2048, 1024, 3, 1, 1}));

  const auto small = wt::wan::parse_vae22_config(kSmall, "small");
  wt::wan::Wan22Vae vae(small, torch::kBFloat16);
  const auto params = vae->named_parameters();
  EXPECT_EQ(params.size(), both[1].size());
  for (const auto& item : params) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16);
    ASSERT_TRUE(both[1].contains(item.key())) << item.key();
    EXPECT_EQ(item.value().sizes().vec(), both[1][item.key()].get<std::vector<int64_t>>()) << item.key();
  }
}

TEST(Vae22Config, AnotherZDimGetsZeroMeanUnitStdAndBadFilesAreOneLine) {
  const auto other = wt::wan::parse_vae22_config(R"({"z_dim": 4})", "vae.json");
  EXPECT_EQ(other.latents_mean, std::vector<double>(4, 0.0));
  EXPECT_EQ(other.latents_std, std::vector<double>(4, 1.0));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"dec_dim": 0})", "vae.json: \"dec_dim\" must be a positive integer"},
      {R"({"version": "2.1"})", "vae.json: describes the Wan2.1 VAE (\"version\"), not the Wan2.2 VAE"},
      {R"({"version": 2.2})", "vae.json: \"version\" must be \"2.1\" or \"2.2\""},
      {R"({"attn_scales": [0.5]})",
       "vae.json: \"attn_scales\" must be empty for the Wan2.2 VAE (the official one takes the key and builds no "
       "attention from it)"},
      {R"({"dim": 8, "dim_mult": [1, 3, 3, 3]})",
       "vae.json: \"dim_mult\": encoder level 1 (8 -> 24 channels) averages 64 values a position into 24 channels, "
       "which do not divide them"},
      {R"({"dim": 8, "dec_dim": 8, "dim_mult": [3, 2, 2, 2], "temperal_downsample": [false, true, true]})",
       "vae.json: \"dim_mult\": encoder level 0 (8 -> 24 channels) averages 32 values a position into 24 channels, "
       "which do not divide them"},
      {R"({"dim": 8, "dec_dim": 2, "dim_mult": [1, 1, 8, 8]})",
       "vae.json: \"dim_mult\": decoder level 2 (16 -> 2 channels) spreads 16 channels over 8 values a position, "
       "which they do not divide"},
      {R"({"dec_dim": 8, "temperal_downsample": [true, true, true]})",
       "vae.json: \"temperal_downsample\" may halve time at most twice"},
      {R"({"latents_mean": [0.5]})", "vae.json: \"latents_mean\" must have z_dim (48) numbers, not 1"},
  };
  for (const auto& [text, expected] : bad) {
    try {
      wt::wan::parse_vae22_config(text, "vae.json");
      ADD_FAILURE() << text;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  wt::wan::Wan22Vae vae(wt::wan::parse_vae22_config(kSmall, "small"));
  try {
    vae->encode(torch::zeros({1, 3, 5, 24, 32}));
    ADD_FAILURE() << "24 rows";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "VAE encode: video [1, 3, 5, 24, 32] must be [B, 3, 1 + 4k, H, W] with H and W positive multiples of 16");
  }
}

// Which VAE a config describes: its "version", else "dec_dim", else the
// weights, else Wan2.1; a config naming the other VAE than the weights is
// one line.
TEST(VideoVae, AConfigSaysWhichVaeOrTheWeightsDo) {
  using wt::wan::VaeVersion;
  const auto parse = [](const std::string& text, std::optional<VaeVersion> weights) {
    return wt::wan::parse_video_vae_config(text, "vae.json", weights, "weights w.pth");
  };
  EXPECT_EQ(parse(R"({"z_dim": 4})", std::nullopt).version, VaeVersion::Wan21);
  EXPECT_EQ(parse(R"({"z_dim": 4})", VaeVersion::Wan22).version, VaeVersion::Wan22);
  EXPECT_EQ(parse(R"({"z_dim": 4})", VaeVersion::Wan22).wan22.dec_dim, 256);
  EXPECT_EQ(parse(R"({"dec_dim": 8})", std::nullopt).version, VaeVersion::Wan22);
  EXPECT_EQ(parse(R"({"version": "2.2"})", std::nullopt).description(), "Wan2.2 VAE (48 channels, 4x16x16)");
  EXPECT_EQ(parse("{}", std::nullopt).description(), "Wan2.1 VAE (16 channels, 4x8x8)");
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"version": "2.1"})",
            "vae.json: describes the Wan2.1 VAE (its \"version\"), and weights w.pth hold the Wan2.2 VAE"},
           {R"({"dec_dim": 8})",
            "vae.json: describes the Wan2.2 VAE (it has \"dec_dim\"), and weights w.pth hold "
            "the Wan2.1 VAE"}}) {
    try {
      parse(text, text.find("2.1") != std::string::npos ? VaeVersion::Wan22 : VaeVersion::Wan21);
      ADD_FAILURE() << text;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
}

// The released layouts: a torch.save'd state dict (Wan2.2_VAE.pth) and a
// safetensors file of the official names load by name into the VAE their
// tensors say, which computes as the one that wrote them; a Wan2.1 file next
// to them is told apart; files of neither are one line.
TEST(VideoVae, WeightFilesSayWhichVaeTheyHoldAndLoadByName) {
  const std::string dir = wt::testing::fresh("vae22-files");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/small22.json") << kSmall;
  std::ofstream(dir + "/small21.json") << kSmall21;
  wt::wan::Wan22Vae saved(wt::wan::parse_vae22_config(kSmall, "small"));
  randomize(*saved, 24);
  wt::io::write_safetensors(dir + "/vae22.safetensors", state_dict(*saved), torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " -c \"import sys, torch; sys.path.insert(0, '" + WANTRAIN_SOURCE_DIR +
      "/tests/reference'); import wan_reference as r; torch.save(r.read_safetensors('" + dir +
      "/vae22.safetensors'), '" + dir + "/Wan2.2_VAE.pth')\"");
  ASSERT_EQ(job.status, 0) << job.output;
  wt::wan::WanVae saved21(wt::wan::parse_vae_config(kSmall21, "small21"));
  randomize(*saved21, 25);
  wt::io::write_safetensors(dir + "/vae21.safetensors", state_dict(*saved21), torch::kFloat32);

  const auto video = torch::rand({1, 3, 5, 32, 32}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 2, 2, 2});
  for (const std::string file : {"Wan2.2_VAE.pth", "vae22.safetensors"}) {
    SCOPED_TRACE(file);
    EXPECT_EQ(wt::wan::detect_vae_version(wt::wan::open_weights(dir + "/" + file)), wt::wan::VaeVersion::Wan22);
    const auto config = wt::wan::video_vae_config(dir + "/" + file, dir + "/small22.json");
    EXPECT_EQ(config.version, wt::wan::VaeVersion::Wan22);
    const auto vae = wt::wan::open_video_vae(dir + "/" + file, dir + "/small22.json");
    EXPECT_EQ(vae->description(), "Wan2.2 VAE (4 channels, 4x16x16)");
    EXPECT_TRUE(torch::equal(vae->encode(video), saved->encode(video)));
    EXPECT_TRUE(torch::equal(vae->decode(latents), saved->decode(latents)));
  }
  const auto vae21 = wt::wan::open_video_vae(dir + "/vae21.safetensors", dir + "/small21.json");
  EXPECT_EQ(vae21->version(), wt::wan::VaeVersion::Wan21);
  EXPECT_EQ(vae21->description(), "Wan2.1 VAE (4 channels, 4x8x8)");
  EXPECT_TRUE(torch::equal(vae21->encode(video), saved21->encode(video)));
  // The small Wan2.2 config with Wan2.1's weights: one line naming both.
  try {
    wt::wan::open_video_vae(dir + "/vae21.safetensors", dir + "/small22.json");
    ADD_FAILURE() << "2.2 config, 2.1 weights";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/small22.json: describes the Wan2.2 VAE (its \"version\"), and weights " +
                                         dir + "/vae21.safetensors hold the Wan2.1 VAE");
  }

  // Neither: a DiT-like file, and a head of 6 channels.
  wt::io::write_safetensors(dir + "/dit.safetensors", {{"patch_embedding.weight", torch::zeros({8, 16, 1, 2, 2})}},
                            torch::kFloat32);
  wt::io::write_safetensors(dir + "/odd.safetensors",
                            {{"decoder.head.2.weight", torch::zeros({6, 8, 3, 3, 3})},
                             {"encoder.conv1.weight", torch::zeros({8, 3, 3, 3, 3})}},
                            torch::kFloat32);
  const std::string rule =
      "; the decoder's last conv makes, and the encoder's first reads, 3 channels in Wan2.1's VAE (RGB) and 12 in "
      "Wan2.2's (2x2 patches of RGB)";
  for (const auto& [file, expected] : std::vector<std::pair<std::string, std::string>>{
           {"dit.safetensors",
            ": not a Wan video VAE: it has no decoder.head.2.weight and no encoder.conv1.weight" + rule},
           {"odd.safetensors",
            ": not a Wan video VAE: its decoder.head.2.weight makes 6 channels and its encoder.conv1.weight reads 3" +
                rule},
       }) {
    SCOPED_TRACE(file);
    try {
      wt::wan::open_video_vae(dir + "/" + file);
      ADD_FAILURE() << file;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), dir + "/" + file + expected);
    }
  }
}

}  // namespace vae22_reference
