// The Wan2.1 video VAE (wan/vae/wan_vae) against tests/reference/vae_reference.py:
// an independent PyTorch evaluation of the official wan/modules/vae.py
// (WanVAE_ in its WanVAE wrapper), run by the torch wheel's PyTorch on the same
// weights (random, in the official names) and the same video and latents.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "../common/tiny_clip.hpp"
#include "wantrain/media/video_writer.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/sample/image_condition.hpp"
#include "wantrain/wan/sample/vace_condition.hpp"
#include "wantrain/wan/sample/fun_control_condition.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_config.hpp"
#include "wantrain/wan/vae/vae_weights.hpp"
#include "wantrain/wan/vae/wan22_vae.hpp"
#include "wantrain/wan/vae/wan_vae.hpp"

// Its own namespace: the unity build compiles it with the other e2e tests,
// whose helpers have the same names.
namespace vae_reference {

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// Weights that make every part matter and keep activations of order 1: the
// norms' gamma around 1, convs at unit gain (every block starts from a
// normalised input), small biases, the attention's output projection (zero
// in a fresh module) drawn too, and the decoder's last conv at 0.3 so that
// few decoded values reach the clamp at +-1.
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

struct Reference {
  at::Tensor latents, decoded;
};

// Runs the reference on `vae`'s weights (fp32) for `video` and `latents`.
Reference run_reference(const std::string& dir, const std::string& config_json, const wt::wan::WanVaeImpl& vae,
                        const at::Tensor& video, const at::Tensor& latents) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  wt::io::write_safetensors(dir + "/weights.safetensors", state_dict(vae), torch::kFloat32);
  wt::io::write_safetensors(dir + "/inputs.safetensors", {{"video", video}, {"latents", latents}}, torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/vae_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  EXPECT_EQ(job.status, 0) << job.output;
  if (job.status != 0) return {};
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  return {file.read(*file.find("latents")), file.read(*file.find("decoded"))};
}

// Both in fp32 on the same inputs; the sums in another order (conv2d per
// frame here as a depth-1 conv3d, the cache concatenated instead of padded,
// einsum against matmul in attention, 1/x multiplied instead of divided):
// a few ulps (1e-7) per op, through some 30 convs, each block renormalised
// by its RMS norm, so that errors do not compound: 1e-5 of the output scale
// at most. 1e-4 is far above that and far below any semantic slip (a frame
// of cache off by one, the time halves swapped, a missing attention scale:
// errors of order 1).
constexpr double kTolerance = 1e-4;

void expect_matches_reference(const char* name, const char* config_json, int64_t batch, int64_t frames, int64_t height,
                              int64_t width) {
  SCOPED_TRACE(name);
  const std::string dir = wt::testing::fresh(std::string("vae-reference-") + name);
  const auto config = wt::wan::parse_vae_config(config_json, name);
  wt::wan::WanVae vae(config);
  randomize(*vae, 11);
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
  // Clamped to [-1, 1]: the scale is 1; most values must lie inside it for
  // the comparison to mean something.
  const double clamped = (reference.decoded.abs() == 1).to(torch::kFloat).mean().item<double>();
  EXPECT_LT(clamped, 0.1);
  EXPECT_GT(max_abs(reference.decoded), 0.3);
  EXPECT_LT(decoded_error, kTolerance) << "decode: max |ours - reference| = " << decoded_error;
  std::cout << "[ measured ] " << name << ": encode " << error / scale << " of scale " << scale << ", decode "
            << decoded_error << " (" << 100 * clamped << "% clamped)\n";
}

// Four levels, time halved by the last two, as Wan2.1; latent statistics of
// its own (z_dim 4).
constexpr const char* kSmall = R"({"dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1,
  "temperal_downsample": [false, true, true], "latents_mean": [0.1, -0.2, 0.3, 0.0],
  "latents_std": [1.5, 0.5, 2.0, 1.0]})";

}  // namespace

// 9 frames: the first alone, then two chunks of 4 that see the cache.
TEST(VaeReference, NineFramesEncodeAndDecodeAsTheReference) { expect_matches_reference("small", kSmall, 1, 9, 24, 32); }

// Attention after residual blocks at two scales (encoder levels 1 and 2,
// decoder levels 1 and 2 by the official decoder scales) besides the middle
// ones; time halved by the first two levels (so the decoder doubles it in
// its last two); Wan2.1's 16 latent channels and statistics; a batch of 2.
TEST(VaeReference, AttentionAndOtherTimeLevelsAsTheReference) {
  expect_matches_reference("attention", R"({"dim": 8, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
    "attn_scales": [0.5, 1.0], "temperal_downsample": [true, true, false]})",
                           2, 9, 16, 16);
}

// What streaming needs: decoding chunk by chunk hands out exactly the frames
// decode returns; the first 5 frames encode to the first 2 latent frames of
// all 9, and the first 2 latent frames decode to the first 5 frames of all 3
// (the model is causal in time and the chunks see the same history).
TEST(VaeReference, ChunksAreCausalAndStreamAsAWhole) {
  const auto config = wt::wan::parse_vae_config(kSmall, "small");
  wt::wan::WanVae vae(config);
  randomize(*vae, 12);
  const auto video = torch::rand({1, 3, 9, 16, 24}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 3, 2, 3});

  const auto whole = vae->decode(latents);
  std::vector<at::Tensor> chunks;
  vae->decode(latents, [&](const at::Tensor& frames) { chunks.push_back(frames.clone()); });
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].size(2), 1);
  EXPECT_EQ(chunks[1].size(2), 4);
  EXPECT_TRUE(torch::equal(torch::cat(chunks, 2), whole));

  const auto encoded = vae->encode(video);
  const auto first = vae->encode(video.narrow(2, 0, 5));
  EXPECT_LE(max_abs(first - encoded.narrow(2, 0, 2)), 1e-5 * max_abs(encoded));
  const auto start = vae->decode(latents.narrow(2, 0, 2));
  EXPECT_LE(max_abs(start - whole.narrow(2, 0, 5)), 1e-5);
  std::cout << "[ measured ] prefix: encode " << max_abs(first - encoded.narrow(2, 0, 2)) << ", decode "
            << max_abs(start - whole.narrow(2, 0, 5)) << "\n";
}

// bf16 weights stay bf16 and the VAE computes in bf16; its latents and video
// follow the fp32 VAE holding the same (bf16) values.
TEST(VaeReference, Bf16WeightsStayBf16AndFollowTheFp32Vae) {
  const auto config = wt::wan::parse_vae_config(kSmall, "small");
  wt::wan::WanVae fp32(config), bf16(config, torch::kBFloat16);
  randomize(*fp32, 13);
  torch::NoGradGuard no_grad;
  auto fp32_params = fp32->named_parameters();
  for (auto& item : bf16->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
    item.value().copy_(fp32_params[item.key()]);
    fp32_params[item.key()].copy_(item.value());  // both hold the bf16 values
  }
  const auto video = torch::rand({1, 3, 9, 24, 32}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 3, 3, 4});
  const auto relative = [](const at::Tensor& got, const at::Tensor& want) {
    return ((got - want).norm() / want.norm()).item<double>();
  };
  const auto encoded = bf16->encode(video);
  EXPECT_EQ(encoded.scalar_type(), torch::kFloat);
  const double encode_error = relative(encoded, fp32->encode(video));
  const double decode_error = relative(bf16->decode(latents), fp32->decode(latents));
  // bf16 keeps 8 bits (0.4% a rounding), some 20 convs deep, each block
  // renormalised: measured 0.02 (encode) and 0.01 (decode) on AMD EPYC.
  EXPECT_LT(encode_error, 0.06);
  EXPECT_LT(decode_error, 0.05);
  std::cout << "[ measured ] bf16 against fp32: encode " << encode_error << ", decode " << decode_error << "\n";
}

namespace {

// An official name in diffusers' AutoencoderKLWan layout, for a VAE without
// attention in its levels (as diffusers' decoder has none), `resnets` residual
// blocks per decoder level.
std::string diffusers_name(const std::string& name, int64_t resnets) {
  const std::map<std::string, std::string> parts = {{"residual.0.", "norm1."},
                                                    {"residual.2.", "conv1."},
                                                    {"residual.3.", "norm2."},
                                                    {"residual.6.", "conv2."},
                                                    {"shortcut.", "conv_shortcut."}};
  const auto block_part = [&](const std::string& rest) {
    for (const auto& [from, to] : parts)
      if (rest.rfind(from, 0) == 0) return to + rest.substr(from.size());
    return rest;
  };
  const auto split = [](const std::string& rest) {  // "N.tail" -> (N, tail)
    const auto dot = rest.find('.');
    return std::make_pair(std::stoll(rest.substr(0, dot)), rest.substr(dot + 1));
  };
  for (const std::string coder : {"encoder.", "decoder."}) {
    if (name.rfind(coder, 0) != 0) continue;
    const std::string rest = name.substr(coder.size());
    if (rest.rfind("conv1.", 0) == 0) return coder + "conv_in." + rest.substr(6);
    if (rest.rfind("head.0.", 0) == 0) return coder + "norm_out." + rest.substr(7);
    if (rest.rfind("head.2.", 0) == 0) return coder + "conv_out." + rest.substr(7);
    if (rest.rfind("middle.", 0) == 0) {
      const auto [n, tail] = split(rest.substr(7));
      if (n == 1) return coder + "mid_block.attentions.0." + tail;
      return coder + "mid_block.resnets." + std::to_string(n / 2) + "." + block_part(tail);
    }
    if (rest.rfind("downsamples.", 0) == 0) {
      const auto [n, tail] = split(rest.substr(12));
      return coder + "down_blocks." + std::to_string(n) + "." + block_part(tail);
    }
    if (rest.rfind("upsamples.", 0) == 0) {
      const auto [n, tail] = split(rest.substr(10));
      const int64_t block = n / (resnets + 1), in_block = n % (resnets + 1);
      if (in_block == resnets) return coder + "up_blocks." + std::to_string(block) + ".upsamplers.0." + tail;
      return coder + "up_blocks." + std::to_string(block) + ".resnets." + std::to_string(in_block) + "." +
             block_part(tail);
    }
  }
  if (name.rfind("conv1.", 0) == 0) return "quant_conv." + name.substr(6);
  if (name.rfind("conv2.", 0) == 0) return "post_quant_conv." + name.substr(6);
  return name;
}

}  // namespace

// The released layout: torch.save of the state dict (Wan2.1_VAE.pth), read
// by the restricted .pth reader; and diffusers' AutoencoderKLWan names in a
// safetensors file. Either loads by name into a VAE that then computes as
// the one that wrote it.
TEST(VaeReference, ATorchSavedStateDictAndDiffusersNamesLoadByName) {
  const std::string dir = wt::testing::fresh("vae-files");
  std::filesystem::create_directories(dir);
  const auto config = wt::wan::parse_vae_config(kSmall, "small");
  wt::wan::WanVae saved(config);
  randomize(*saved, 14);
  wt::io::write_safetensors(dir + "/vae.safetensors", state_dict(*saved), torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " -c \"import sys, torch; sys.path.insert(0, '" + WANTRAIN_SOURCE_DIR +
      "/tests/reference'); import wan_reference as r; torch.save(r.read_safetensors('" + dir + "/vae.safetensors'), '" +
      dir + "/Wan2.1_VAE.pth')\"");
  ASSERT_EQ(job.status, 0) << job.output;
  wt::io::NamedTensors diffusers;
  for (const auto& [name, tensor] : state_dict(*saved))
    diffusers.emplace_back(diffusers_name(name, config.num_res_blocks + 1), tensor);
  wt::io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", diffusers, torch::kFloat32);

  const auto video = torch::rand({1, 3, 5, 16, 16}) * 2 - 1;
  const auto latents = torch::randn({1, 4, 2, 2, 2});
  const auto want_latents = saved->encode(video), want_video = saved->decode(latents);
  for (const std::string file : {"Wan2.1_VAE.pth", "diffusion_pytorch_model.safetensors"}) {
    SCOPED_TRACE(file);
    torch::manual_seed(99);
    wt::wan::WanVae loaded(config);
    const auto source = wt::wan::open_vae_weights(dir + "/" + file);
    EXPECT_EQ(source.diffusers_names, file != "Wan2.1_VAE.pth");
    const auto report = wt::wan::load_weights(*loaded, source);
    EXPECT_TRUE(report.complete()) << report.summary();
    EXPECT_EQ(report.loaded.size(), diffusers.size());
    EXPECT_TRUE(torch::equal(loaded->encode(video), want_latents));
    EXPECT_TRUE(torch::equal(loaded->decode(latents), want_video));
  }
}

// The default is Wan2.1's VAE, to the name and shape of every tensor of the
// official state dict (as the reference lays it out: 194 tensors, 126.9 M
// values), made in bf16 without an fp32 copy.
TEST(VaeConfig, TheDefaultIsWan21sVaeToTheTensor) {
  const wt::wan::VaeConfig wan21;
  EXPECT_EQ(wan21.dim, 96);
  EXPECT_EQ(wan21.z_dim, 16);
  EXPECT_EQ(wan21.spatial_factor(), 8);
  EXPECT_EQ(wan21.temporal_factor(), 4);
  EXPECT_DOUBLE_EQ(wan21.latents_mean[7], 1.5508);
  EXPECT_DOUBLE_EQ(wan21.latents_std[15], 1.9160);
  const auto job = wt::testing::launch(std::string(WANTRAIN_PYTHON) + " -c \"import sys, json; sys.path.insert(0, '" +
                                       WANTRAIN_SOURCE_DIR +
                                       "/tests/reference'); import vae_reference as r; "
                                       "print(json.dumps(r.parameter_shapes(r.DEFAULTS)))\"");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto official = nlohmann::json::parse(job.output);
  wt::wan::WanVae vae(wan21, torch::kBFloat16);
  const auto params = vae->named_parameters();
  EXPECT_EQ(params.size(), official.size());
  int64_t values = 0;
  for (const auto& item : params) {
    values += item.value().numel();
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16);
    ASSERT_TRUE(official.contains(item.key())) << item.key();
    EXPECT_EQ(item.value().sizes().vec(), official[item.key()].get<std::vector<int64_t>>()) << item.key();
  }
  EXPECT_EQ(params.size(), 194u);
  EXPECT_EQ(values, 126892531);
}

TEST(VaeConfig, AnotherZDimGetsZeroMeanUnitStdAndBadFilesAreOneLine) {
  const auto other = wt::wan::parse_vae_config(R"({"z_dim": 4})", "vae.json");
  EXPECT_EQ(other.latents_mean, std::vector<double>(4, 0.0));
  EXPECT_EQ(other.latents_std, std::vector<double>(4, 1.0));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[1]", "vae.json: not a JSON object of VAE settings"},
      {R"({"dim": 0})", "vae.json: \"dim\" must be a positive integer"},
      {R"({"temporal_downsample": [false, true, true]})", "vae.json: unknown key \"temporal_downsample\""},
      {R"({"dim_mult": [1, 2, 4, 4, 4], "temperal_downsample": [false, true, true, true]})",
       "vae.json: \"dim_mult\" must be 1 to 4 positive integers"},
      {R"({"dim_mult": [1, 2]})",
       "vae.json: \"temperal_downsample\" must have one entry per level but the last (1), not 3"},
      {R"({"temperal_downsample": [true, true, true]})",
       "vae.json: \"temperal_downsample\" may halve time at most twice"},
      {R"({"temperal_downsample": [0, 1, 1]})", "vae.json: \"temperal_downsample\" must be a list of true or false"},
      {R"({"latents_mean": [0.5]})", "vae.json: \"latents_mean\" must have z_dim (16) numbers, not 1"},
      {R"({"z_dim": 2, "latents_std": [1, 0]})", "vae.json: \"latents_std\" must be positive"},
      {R"({"attn_scales": 0.5})", "vae.json: \"attn_scales\" must be a list of numbers"},
  };
  for (const auto& [text, expected] : bad) {
    try {
      wt::wan::parse_vae_config(text, "vae.json");
      ADD_FAILURE() << text;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  // Input of the wrong shape is one line too.
  wt::wan::WanVae vae(wt::wan::parse_vae_config(kSmall, "small"));
  try {
    vae->encode(torch::zeros({1, 3, 4, 16, 16}));
    ADD_FAILURE() << "4 frames";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "VAE encode: video [1, 3, 4, 16, 16] must be [B, 3, 1 + 4k, H, W] with H and W positive multiples of 8");
  }
}

namespace {

// The image-to-video condition y (wan/sample/image_condition) against
// tests/reference/i2v_condition_reference.py, which builds it as Wan's
// image2video.py and first_last_frame2video.py do, with the reference VAE.
void expect_condition_matches_reference(const char* name, int64_t frames, bool last_frame) {
  SCOPED_TRACE(name);
  const std::string dir = wt::testing::fresh(std::string("i2v-condition-") + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << kSmall;
  const auto config = wt::wan::parse_vae_config(kSmall, "small");
  wt::wan::WanVae vae(config);
  randomize(*vae, 31);
  vae->eval();
  torch::manual_seed(32);
  const auto first = torch::rand({3, 24, 32}) * 2 - 1, last = torch::rand({3, 24, 32}) * 2 - 1;
  wt::io::NamedTensors inputs{{"first", first}, {"frames", torch::tensor({float(frames)})}};
  if (last_frame) inputs.emplace_back("last", last);
  wt::io::write_safetensors(dir + "/weights.safetensors", state_dict(*vae), torch::kFloat32);
  wt::io::write_safetensors(dir + "/inputs.safetensors", inputs, torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/i2v_condition_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto reference = file.read(*file.find("y"));
  const auto ours = wt::wan::image_condition_y(*vae, first, last_frame ? last : at::Tensor(), frames);
  ASSERT_EQ(ours.sizes(), reference.sizes());
  // The mask exactly; the latents as the VAE's own reference test bounds them.
  EXPECT_TRUE(torch::equal(ours.narrow(0, 0, 4), reference.narrow(0, 0, 4)));
  const double scale = max_abs(reference), error = max_abs(ours - reference);
  EXPECT_LT(error, 1e-4 * scale) << "max |ours - reference| = " << error << " of " << scale;
}

}  // namespace

TEST(ImageCondition, FirstFrameConditionIsImage2VideosY) { expect_condition_matches_reference("i2v", 9, false); }
TEST(ImageCondition, FirstAndLastFrameConditionIsFlf2VideosY) { expect_condition_matches_reference("flf2v", 9, true); }
TEST(ImageCondition, AStillIsItsOwnFirstFrame) { expect_condition_matches_reference("still", 1, false); }

namespace {

// The VACE context (wan/sample/vace_condition) against
// tests/reference/vace_condition_reference.py, which builds it as Wan2.1's
// vace.py does, with the reference VAE: the given video and mask (the mask
// not 0 or 1 everywhere, so that the binarised split and the mask channels,
// folded as given, both show), reference pictures of the video's size and
// of others, or nothing given (zeros and ones, as released).
struct VaceCase {
  const char* name;
  int64_t frames;
  bool video, mask;
  std::vector<std::array<int64_t, 2>> reference_sizes;
};

void expect_vace_context_matches_reference(const VaceCase& c) {
  SCOPED_TRACE(c.name);
  const std::string dir = wt::testing::fresh(std::string("vace-context-") + c.name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << kSmall;
  wt::wan::WanVae vae(wt::wan::parse_vae_config(kSmall, "small"));
  randomize(*vae, 41);
  vae->eval();
  torch::manual_seed(42);
  const int64_t h = 24, w = 32;
  wt::io::NamedTensors inputs{{"size", torch::tensor({float(c.frames), float(h), float(w)})}};
  wt::wan::VaceSource source;
  if (c.video) {
    source.video = torch::rand({3, c.frames, h, w}) * 2 - 1;
    inputs.emplace_back("video", source.video);
  }
  if (c.mask) {
    source.mask = torch::rand({1, c.frames, h, w});
    inputs.emplace_back("mask", source.mask);
  }
  for (size_t i = 0; i < c.reference_sizes.size(); ++i) {
    const auto picture = torch::rand({3, c.reference_sizes[i][0], c.reference_sizes[i][1]}) * 2 - 1;
    inputs.emplace_back("ref" + std::to_string(i), picture);
    source.references.push_back(wt::wan::fit_reference(picture, h, w));
  }
  wt::io::write_safetensors(dir + "/weights.safetensors", state_dict(*vae), torch::kFloat32);
  wt::io::write_safetensors(dir + "/inputs.safetensors", inputs, torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/vace_condition_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto reference = file.read(*file.find("context"));
  const auto ours = wt::wan::vace_context(*vae, source, c.frames, h, w);
  const int64_t refs = int64_t(c.reference_sizes.size()), z = vae->z_dim();
  ASSERT_EQ(wt::wan::vace_context_channels(*vae), 2 * z + 64);
  ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{2 * z + 64, refs + (c.frames + 3) / 4, h / 8, w / 8}));
  ASSERT_EQ(ours.sizes(), reference.sizes());
  // The mask channels exactly; the latents as the VAE's own reference test bounds them.
  EXPECT_TRUE(torch::equal(ours.narrow(0, 2 * z, 64), reference.narrow(0, 2 * z, 64)));
  const double scale = max_abs(reference.narrow(0, 0, 2 * z)), error = max_abs(ours - reference);
  EXPECT_GT(scale, 0.01);
  EXPECT_LT(error, 1e-4 * scale) << "max |ours - reference| = " << error << " of " << scale;
  // The drawn latents carry the references' frames too; the decode drops them.
  const auto sampled = torch::randn({1, z, refs + (c.frames + 3) / 4, h / 8, w / 8});
  EXPECT_TRUE(torch::equal(wt::wan::drop_reference_frames(sampled, refs), sampled.narrow(2, refs, (c.frames + 3) / 4)));
}

}  // namespace

TEST(VaceContext, AVideoAMaskAndReferencesOfOtherSizesAreVacePysContext) {
  expect_vace_context_matches_reference({"all", 9, true, true, {{24, 32}, {12, 40}, {30, 20}}});
}
TEST(VaceContext, NothingGivenIsZerosAndOnesAsReleased) {
  expect_vace_context_matches_reference({"none", 5, false, false, {}});
}
TEST(VaceContext, AVideoWithoutAMaskIsMadeWhole) {
  expect_vace_context_matches_reference({"video", 9, true, false, {{16, 16}}});
}

// Bad inputs are one line each, naming the input.
TEST(VaceContext, InputsOfAnotherSizeAreOneLineEach) {
  wt::wan::WanVae vae(wt::wan::parse_vae_config(kSmall, "small"));
  const auto message = [&](const wt::wan::VaceSource& source, int64_t frames) -> std::string {
    try {
      wt::wan::vace_context(*vae, source, frames, 24, 32);
    } catch (const wt::UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message({torch::zeros({3, 5, 24, 32}), {}, {}}, 9),
            "the VACE video must be [3,9,24,32] (3 channels, frames, height, width), got [3,5,24,32]");
  EXPECT_EQ(message({{}, torch::zeros({1, 9, 16, 32}), {}}, 9),
            "the VACE mask must be [1,9,24,32] (1 channel, frames, height, width), got [1,9,16,32]");
  EXPECT_EQ(message({{}, {}, {torch::zeros({3, 12, 12})}}, 9),
            "a VACE reference picture must be [3,24,32] (fitted to the video), got [3,12,12]");
  EXPECT_EQ(message({}, 8), "a VACE context needs 1 + 4k frames, got 8");
}

namespace {

// wansample's dir/sample.h5 within 1e-4 of the largest latent of the reference loop's dir/reference.safetensors.
void expect_sample_is_the_reference(const std::string& dir) {
  const auto file = wt::io::SafetensorsFile::open(dir + "/reference.safetensors");
  const auto expected = file.read(*file.find("latents"));
  const auto ours = wt::testing::sampled_latents(dir + "/sample.h5");
  ASSERT_EQ(ours.sizes(), expected.sizes());
  const double scale = max_abs(expected), error = max_abs(ours - expected);
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(error, 1e-4 * scale) << "max |wansample - reference| = " << error << " of " << scale;
}

// An 8-bit RGB picture of `width` x `height` whose pixel (x, y) is `pixel(x, y, channel)`.
wt::media::Image drawn(int width, int height, const std::function<int(int, int, int)>& pixel) {
  wt::media::Image image(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) image.row(y)[3 * x + c] = uint8_t(std::clamp(pixel(x, y, c), 0, 255));
  return image;
}

// A model of `config` with weights drawn from `seed` (0.2 N(0, 1)), written to `path`.
void write_random_model(const wt::wan::WanConfig& config, uint64_t seed, const std::string& path) {
  torch::manual_seed(seed);
  wt::wan::WanModel model(config);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  }
  wt::wan::save_weights(*model, path);
}

// A Fun-Control sample's inputs in `dir`: a VAE of 6 latent channels
// (vae.json, vae.safetensors; with 4, in_dim 3 z = 2 z + 4 would read as an
// image-to-video model), a control video of 5 frames (control.mp4: a moving
// gradient), a start and a reference picture (start.png, ref.png), all
// `side` pixels square; and the reference scripts' inputs: those in [-1, 1],
// noise of 2 latent frames, a context of 5 tokens, 10 steps, cfg 4, shift 3.
wt::io::NamedTensors fun_control_inputs(const std::string& dir, int side) {
  const std::string vae_json = R"({"dim": 8, "z_dim": 6, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1,
      "temperal_downsample": [false, true, true], "latents_mean": [0.1, -0.2, 0.3, 0.0, 0.2, -0.1],
      "latents_std": [1.5, 0.5, 2.0, 1.0, 0.8, 1.2]})";
  std::ofstream(dir + "/vae.json") << vae_json;
  wt::wan::WanVae vae(wt::wan::parse_vae_config(vae_json, "six channels"));
  randomize(*vae, 61);
  wt::io::write_safetensors(dir + "/vae.safetensors", state_dict(*vae), torch::kFloat32);
  const int frames = 5;
  {
    wt::media::VideoWriter video(dir + "/control.mp4", side, side);
    for (int f = 0; f < frames; ++f)
      video.write(drawn(side, side, [&](int x, int y, int c) { return 8 * x + 5 * y + 40 * c + 20 * f; }));
    video.finish();
  }
  wt::media::write_png(dir + "/start.png",
                       drawn(side, side, [](int x, int y, int c) { return 30 + 6 * x * c + 3 * y; }));
  wt::media::write_png(dir + "/ref.png",
                       drawn(side, side, [](int x, int y, int c) { return 220 - 5 * y - 2 * x * c; }));
  torch::manual_seed(64);
  return {{"control", wt::wan::read_control_video(dir + "/control.mp4", frames, side, side)},
          {"start", wt::wan::read_picture(dir + "/start.png")},
          {"ref", wt::wan::read_picture(dir + "/ref.png")},
          {"noise", torch::randn({6, 2, side / 8, side / 8})},
          {"context", torch::randn({5, 8})},
          {"steps", torch::tensor({10.0f})},
          {"cfg", torch::tensor({4.0f})},
          {"shift", torch::tensor({3.0f})}};
}

}  // namespace

// wansample with a VACE model, its control video, mask video and a
// reference picture of another size, 10 guided Euler steps, against
// tests/reference/vace_sample_reference.py's loop over the reference
// forward and context: the same latents (the reference's frame dropped),
// and a decoded video of the sample's own frames.
TEST(VaceSample, TenGuidedStepsAreTheReferenceLoop) {
  const std::string dir = wt::testing::fresh("vace-sample");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/vae.json") << kSmall;
  wt::wan::WanVae vae(wt::wan::parse_vae_config(kSmall, "small"));
  randomize(*vae, 51);
  wt::io::write_safetensors(dir + "/vae.safetensors", state_dict(*vae), torch::kFloat32);
  // A VACE model of the small VAE's latents: 4 channels, a context of 2 x 4 + 64.
  const std::string model_json = R"({"dim": 32, "ffn_dim": 48, "num_heads": 2, "num_layers": 3, "freq_dim": 32,
      "text_dim": 8, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 4, "out_dim": 4, "eps": 1e-6,
      "qk_norm": true, "cross_attn_norm": true, "model_type": "vace", "vace_layers": [0, 2], "vace_in_dim": 72})";
  std::ofstream(dir + "/model.json") << model_json;
  torch::manual_seed(52);
  wt::wan::WanModel model(wt::wan::parse_model_config(model_json, "model.json"));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  }
  wt::wan::save_weights(*model, dir + "/model.safetensors");
  // 5 frames of 32 x 32: a moving gradient; the mask keeps the left half.
  const int frames = 5, side = 32;
  {
    wt::media::VideoWriter video(dir + "/control.mp4", side, side), mask(dir + "/mask.mp4", side, side);
    for (int f = 0; f < frames; ++f) {
      video.write(drawn(side, side, [&](int x, int y, int c) { return 8 * x + 5 * y + 40 * c + 20 * f; }));
      mask.write(drawn(side, side, [&](int x, int, int) { return x < side / 2 ? 0 : 255; }));
    }
    video.finish();
    mask.finish();
  }
  wt::media::write_png(dir + "/ref.png", drawn(20, 12, [](int x, int y, int c) { return 200 - 9 * x + 7 * y * c; }));
  const int64_t latent_frames = 2, latent_side = side / 8, references = 1;
  torch::manual_seed(53);
  wt::io::NamedTensors inputs{{"video", wt::wan::read_control_video(dir + "/control.mp4", frames, side, side)},
                              {"mask_video", wt::wan::read_control_video(dir + "/mask.mp4", frames, side, side)},
                              {"ref0", wt::wan::read_picture(dir + "/ref.png")},
                              {"noise", torch::randn({4, references + latent_frames, latent_side, latent_side})},
                              {"context", torch::randn({5, 8})},
                              {"steps", torch::tensor({10.0f})},
                              {"cfg", torch::tensor({4.0f})},
                              {"shift", torch::tensor({3.0f})},
                              {"scale", torch::tensor({0.8f})}};
  wt::io::write_safetensors(dir + "/inputs.safetensors", inputs, torch::kFloat32);
  const auto reference = wt::testing::launch(std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
                                             "/tests/reference/vace_sample_reference.py " + dir + "/model.json " + dir +
                                             "/model.safetensors " + dir + "/vae.json " + dir + "/vae.safetensors " +
                                             dir + "/inputs.safetensors " + dir + "/reference.safetensors");
  ASSERT_EQ(reference.status, 0) << reference.output;
  const auto sample = wt::testing::launch(
      std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/model.safetensors --model-config " + dir +
      "/model.json --text " + dir + "/text.h5 --frames 2 --size 4x4 --noise " + dir +
      "/noise.h5 --solver euler --steps 10 --cfg 4 --shift 3 --vae " + dir + "/vae.safetensors --vae-config " + dir +
      "/vae.json --src-video " + dir + "/control.mp4 --src-mask " + dir + "/mask.mp4 --src-ref-images " + dir +
      "/ref.png --vace-scale 0.8 --out " + dir + "/sample.h5 --video " + dir + "/sample.mp4");
  ASSERT_EQ(sample.status, 0) << sample.output;
  EXPECT_EQ(wt::testing::occurrences(sample.output, "VACE control at 32x32, 5 frames: " + dir + "/control.mp4, mask " +
                                                        dir + "/mask.mp4, 1 reference picture; context [72,3,4,4]"),
            1u)
      << sample.output;
  EXPECT_EQ(wt::testing::occurrences(sample.output, "decoded 5 frames of 32x32"), 1u) << sample.output;
  expect_sample_is_the_reference(dir);
}

// A Fun-Control V1.1 model (VideoX-Fun's Wan2.1-Fun-Control: i2v, in_dim
// 3 z, the CLIP branch, ref_conv) sampled by wansample from a control
// video, a start picture and a reference picture, against
// tests/reference/fun_control_sample_reference.py: the condition as
// pipeline_wan_fun_control.py builds it, the reference forward, guidance
// with the condition in both branches, 10 Euler steps.
TEST(FunControlSample, TenGuidedStepsAreTheReferenceLoop) {
  const std::string dir = wt::testing::fresh("fun-control-sample");
  std::filesystem::create_directories(dir);
  const int side = 32;
  const wt::wan::ClipVisionConfig tiny_clip{/*image_size=*/28, /*patch_size=*/14, /*dim=*/160,
                                            /*mlp_ratio=*/4,   /*num_heads=*/2,   /*num_layers=*/3};
  std::ofstream(dir + "/clip.json") << wt::testing::clip_config_json(tiny_clip);
  wt::io::write_safetensors(dir + "/clip.safetensors", wt::testing::released_clip_state_dict(tiny_clip, 62),
                            torch::kFloat32);
  const std::string model_json = R"({"model_type": "i2v", "image_dim": 160, "image_tokens": 5, "dim": 32,
      "ffn_dim": 48, "num_heads": 2, "num_layers": 2, "freq_dim": 32, "text_dim": 8, "text_len": 16,
      "patch_size": [1, 2, 2], "in_dim": 18, "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true,
      "add_ref_conv": true, "in_dim_ref_conv": 6})";
  std::ofstream(dir + "/model.json") << model_json;
  const auto config = wt::wan::parse_model_config(model_json, "model.json");
  ASSERT_TRUE(config.fun_control() && config.ref_conv && config.image_branch());
  write_random_model(config, 63, dir + "/model.safetensors");
  wt::io::write_safetensors(dir + "/inputs.safetensors", fun_control_inputs(dir, side), torch::kFloat32);
  const auto reference = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/fun_control_sample_reference.py " +
      dir + "/model.json " + dir + "/model.safetensors " + dir + "/vae.json " + dir + "/vae.safetensors " + dir +
      "/clip.json " + dir + "/clip.safetensors " + dir + "/inputs.safetensors " + dir + "/reference.safetensors");
  ASSERT_EQ(reference.status, 0) << reference.output;
  const auto sample = wt::testing::launch(
      std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/model.safetensors --model-config " + dir +
      "/model.json --text " + dir + "/text.h5 --frames 2 --size 4x4 --noise " + dir +
      "/noise.h5 --solver euler --steps 10 --cfg 4 --shift 3 --vae " + dir + "/vae.safetensors --vae-config " + dir +
      "/vae.json --clip " + dir + "/clip.safetensors --control-video " + dir + "/control.mp4 --image " + dir +
      "/start.png --ref-image " + dir + "/ref.png --out " + dir + "/sample.h5 --video " + dir + "/sample.mp4");
  ASSERT_EQ(sample.status, 0) << sample.output;
  EXPECT_EQ(wt::testing::occurrences(sample.output, "Fun-Control at 32x32, 5 frames: control " + dir +
                                                        "/control.mp4, start picture " + dir +
                                                        "/start.png, reference picture " + dir + "/ref.png"),
            1u)
      << sample.output;
  EXPECT_EQ(wt::testing::occurrences(sample.output, "decoded 5 frames of 32x32"), 1u) << sample.output;
  expect_sample_is_the_reference(dir);

  // Bad inputs: one line each, before any step.
  ASSERT_EQ(wt::testing::launch("ffmpeg -hide_banner -loglevel error -y -f lavfi -i testsrc2=size=32x32:rate=16 "
                                "-frames:v 3 -pix_fmt yuv420p " +
                                dir + "/short.mp4")
                .status,
            0);
  std::ofstream(dir + "/bad.png") << "not a picture";
  const std::string t2v_json = R"({"dim": 32, "ffn_dim": 48, "num_heads": 2, "num_layers": 2, "freq_dim": 32,
      "text_dim": 8, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 6, "out_dim": 6, "eps": 1e-6,
      "qk_norm": true, "cross_attn_norm": true})";
  std::ofstream(dir + "/t2v.json") << t2v_json;
  wt::wan::save_weights(*wt::wan::WanModel(wt::wan::parse_model_config(t2v_json, "t2v.json")),
                        dir + "/t2v.safetensors");
  const std::string common = " --text " + dir + "/text.h5 --frames 2 --size 4x4 --noise " + dir +
                             "/noise.h5 --steps 2 --vae " + dir + "/vae.safetensors --vae-config " + dir +
                             "/vae.json --out " + dir + "/refused.h5";
  const std::string fun = std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/model.safetensors --model-config " +
                          dir + "/model.json" + common;
  for (const auto& [command, line] : std::vector<std::pair<std::string, std::string>>{
           {fun + " --control-video " + dir + "/short.mp4", dir + "/short.mp4: 3 frames, shorter than the sample's 5"},
           {fun + " --clip " + dir + "/clip.safetensors --ref-image " + dir + "/bad.png",
            dir + "/bad.png: no picture FFmpeg can read"},
           {fun + " --image " + dir + "/start.png",
            "option --clip: the i2v model reads the picture's CLIP features: give the CLIP encoder"},
           {std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/t2v.safetensors --model-config " + dir +
                "/t2v.json" + common + " --control-video " + dir + "/control.mp4",
            "option --control-video: the model (" + dir +
                "/t2v.json) is t2v with in_dim 6: not a Fun-Control model "
                "(i2v with in_dim 3 x out_dim = 18, or Wan2.2-Fun's 22)"},
           {std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/t2v.safetensors --model-config " + dir +
                "/t2v.json" + common + " --ref-image " + dir + "/ref.png",
            "option --ref-image: the model (" + dir +
                "/t2v.json) has no ref_conv: a reference picture is for a "
                "Fun-Control V1.1 model (add_ref_conv)"}}) {
    const auto refused = wt::testing::launch(command);
    EXPECT_EQ(refused.status, 2) << refused.output;
    EXPECT_EQ(wt::testing::occurrences(refused.output, line), 1u) << line << "\n" << refused.output;
  }
}

// A Wan2.2-Fun-A14B-Control model (VideoX-Fun's Wan2.2-Fun: i2v, in_dim
// 3 z + 4, no CLIP branch, ref_conv; two experts) sampled by wansample from
// a control video, a start picture and a reference picture, against
// tests/reference/fun_control_a14b_sample_reference.py: the condition as
// pipeline_wan2_2_fun_control.py builds it (the control's latents, then the
// start picture's mask and masked video), the experts switching at the
// boundary, 10 guided Euler steps; and without a start picture, the
// condition's mask and masked video all zero.
TEST(FunControlSample, Wan22FunTwoExpertsAreTheReferenceLoop) {
  const std::string dir = wt::testing::fresh("fun-control-a14b-sample");
  std::filesystem::create_directories(dir);
  const int side = 32;
  const std::string model_json = R"({"model_type": "i2v", "dim": 32, "ffn_dim": 48, "num_heads": 2,
      "num_layers": 2, "freq_dim": 32, "text_dim": 8, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 22,
      "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true, "add_ref_conv": true,
      "in_dim_ref_conv": 6})";
  std::ofstream(dir + "/model.json") << model_json;
  const auto config = wt::wan::parse_model_config(model_json, "model.json");
  ASSERT_TRUE(config.fun_control_with_mask() && config.ref_conv && !config.image_branch());
  write_random_model(config, 71, dir + "/low.safetensors");
  write_random_model(config, 72, dir + "/high.safetensors");
  auto inputs = fun_control_inputs(dir, side);
  // shift 3 over 10 steps: sigma 0.9375 at step 3, 0.9 at step 4 — both experts run.
  inputs.emplace_back("boundary", torch::tensor({0.92f}));
  // With and without a start picture; and a still (one latent frame), whose
  // start the pipeline keeps whole (mask 1), unlike Wan2.1-Fun's.
  for (const auto& [start, latent_frames] : {std::pair{true, 2}, {false, 2}, {true, 1}}) {
    SCOPED_TRACE(fmt::format("start {}, {} latent frames", start, latent_frames));
    const int frames = 4 * (latent_frames - 1) + 1;
    auto given = inputs;
    if (!start) given.erase(std::find_if(given.begin(), given.end(), [](const auto& t) { return t.first == "start"; }));
    for (auto& [name, tensor] : given)
      if (name == "noise" || name == "control") tensor = tensor.narrow(1, 0, name == "noise" ? latent_frames : frames);
    wt::io::write_safetensors(dir + "/inputs.safetensors", given, torch::kFloat32);
    const auto reference =
        wt::testing::launch(std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
                            "/tests/reference/fun_control_a14b_sample_reference.py " + dir + "/model.json " + dir +
                            "/low.safetensors " + dir + "/high.safetensors " + dir + "/vae.json " + dir +
                            "/vae.safetensors " + dir + "/inputs.safetensors " + dir + "/reference.safetensors");
    ASSERT_EQ(reference.status, 0) << reference.output;
    const auto sample = wt::testing::launch(
        std::string(WANTRAIN_WANSAMPLE) + " --low-noise " + dir + "/low.safetensors --high-noise " + dir +
        "/high.safetensors --boundary 0.92 --model-config " + dir + "/model.json --text " + dir + "/text.h5 --frames " +
        std::to_string(latent_frames) + " --size 4x4 --noise " + dir +
        "/noise.h5 --solver euler --steps 10 --cfg 4 --shift 3 --vae " + dir + "/vae.safetensors --vae-config " + dir +
        "/vae.json --control-video " + dir + "/control.mp4 --ref-image " + dir + "/ref.png" +
        (start ? " --image " + dir + "/start.png" : "") + " --out " + dir + "/sample.h5");
    ASSERT_EQ(sample.status, 0) << sample.output;
    EXPECT_EQ(
        wt::testing::occurrences(sample.output, fmt::format("Fun-Control (Wan2.2-Fun: with the start's mask) at "
                                                            "32x32, {} frames: control {}/control.mp4, start "
                                                            "picture {}, reference picture {}/ref.png\n",
                                                            frames, dir, start ? dir + "/start.png" : "none", dir)),
        1u)
        << sample.output;
    expect_sample_is_the_reference(dir);
  }
}

// A Wan2.2-Fun-5B-Control model (VideoX-Fun's Wan2.2-Fun on the Wan2.2 VAE:
// i2v, in_dim 3 z + 4 with z = 48, no CLIP branch, ref_conv; one model)
// sampled by wansample from a control video, a start picture and a
// reference picture, against tests/reference/fun_control_5b_sample_reference.py:
// pipeline_wan2_2_fun_control.py's condition, and its spatial_compression_ratio
// >= 16 branch: the start's latents held in frame 0 before the loop and after
// every step, its tokens at timestep 0; 10 guided Euler steps. Without a
// start picture nothing is held; a still with one is its start.
TEST(FunControlSample, Wan22Fun5BHoldsItsStartAsTheReferenceLoop) {
  const std::string dir = wt::testing::fresh("fun-control-5b-sample");
  std::filesystem::create_directories(dir);
  const int side = 64;
  const std::string model_json = R"({"model_type": "ti2v", "dim": 32, "ffn_dim": 48, "num_heads": 2,
      "num_layers": 2, "freq_dim": 32, "text_dim": 8, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 148,
      "out_dim": 48, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true, "add_ref_conv": true,
      "in_dim_ref_conv": 48})";
  std::ofstream(dir + "/model.json") << model_json;
  const auto config = wt::wan::parse_model_config(model_json, "model.json");
  ASSERT_TRUE(config.holds_start_frame() && config.ref_conv && !config.image_branch());
  write_random_model(config, 81, dir + "/model.safetensors");
  // A Wan2.2 VAE of the release's 48 latent channels (4 x 16 x 16).
  auto inputs = fun_control_inputs(dir, side);
  const std::string vae_json = R"({"version": "2.2", "dim": 8, "dec_dim": 12, "z_dim": 48, "dim_mult": [1, 2, 2, 2],
      "num_res_blocks": 1, "temperal_downsample": [false, true, true]})";
  std::ofstream(dir + "/vae.json") << vae_json;
  wt::wan::Wan22Vae vae(wt::wan::parse_vae22_config(vae_json, "48 channels"));
  randomize(*vae, 82);
  wt::io::write_safetensors(dir + "/vae.safetensors", state_dict(*vae), torch::kFloat32);
  torch::manual_seed(83);
  for (auto& [name, tensor] : inputs)
    if (name == "noise") tensor = torch::randn({48, 2, side / 16, side / 16});
  for (const auto& [start, latent_frames] : {std::pair{true, 2}, {false, 2}, {true, 1}}) {
    SCOPED_TRACE(fmt::format("start {}, {} latent frames", start, latent_frames));
    const int frames = 4 * (latent_frames - 1) + 1;
    auto given = inputs;
    if (!start) given.erase(std::find_if(given.begin(), given.end(), [](const auto& t) { return t.first == "start"; }));
    for (auto& [name, tensor] : given)
      if (name == "noise" || name == "control") tensor = tensor.narrow(1, 0, name == "noise" ? latent_frames : frames);
    wt::io::write_safetensors(dir + "/inputs.safetensors", given, torch::kFloat32);
    const auto reference = wt::testing::launch(
        std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
        "/tests/reference/fun_control_5b_sample_reference.py " + dir + "/model.json " + dir + "/model.safetensors " +
        dir + "/vae.json " + dir + "/vae.safetensors " + dir + "/inputs.safetensors " + dir + "/reference.safetensors");
    ASSERT_EQ(reference.status, 0) << reference.output;
    const auto sample = wt::testing::launch(
        std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/model.safetensors --model-config " + dir +
        "/model.json --text " + dir + "/text.h5 --frames " + std::to_string(latent_frames) + " --size 4x4 --noise " +
        dir + "/noise.h5 --solver euler --steps 10 --cfg 4 --shift 3 --vae " + dir + "/vae.safetensors --vae-config " +
        dir + "/vae.json --control-video " + dir + "/control.mp4 --ref-image " + dir + "/ref.png" +
        (start ? " --image " + dir + "/start.png" : "") + " --out " + dir + "/sample.h5");
    ASSERT_EQ(sample.status, 0) << sample.output;
    EXPECT_EQ(wt::testing::occurrences(
                  sample.output, fmt::format("Fun-Control (Wan2.2-Fun{}) at 64x64, {} frames: control {}/control.mp4, "
                                             "start picture {}, reference picture {}/ref.png\n",
                                             start ? "-5B: with the start's mask, its latents held as frame 0"
                                                   : ": with the start's mask",
                                             frames, dir, start ? dir + "/start.png" : "none", dir)),
              1u)
        << sample.output;
    expect_sample_is_the_reference(dir);
  }
}

// The mask alone, by hand: i2v marks latent frame 0 (all 4 channels); flf2v
// also channel 3 of the last latent frame (pixel frame F - 1 is the last of
// its group of 4).
TEST(ImageCondition, TheFrameMaskMarksTheGivenFrames) {
  const auto first = wt::wan::frame_mask(9, 2, 3, false), both = wt::wan::frame_mask(9, 2, 3, true);
  ASSERT_EQ(first.sizes(), (std::vector<int64_t>{4, 3, 2, 3}));
  EXPECT_EQ(first.select(1, 0).min().item<float>(), 1.0f);
  EXPECT_EQ(first.narrow(1, 1, 2).max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(both.narrow(1, 0, 2), first.narrow(1, 0, 2)));
  EXPECT_EQ(both.select(1, 2).narrow(0, 0, 3).max().item<float>(), 0.0f);
  EXPECT_EQ(both.select(1, 2).select(0, 3).min().item<float>(), 1.0f);
  EXPECT_THROW(wt::wan::frame_mask(8, 2, 3, false), wt::UsageError);
}

// image2video.py's size: the picture's aspect ratio within max_area, each
// side floored to a multiple of 16 (lat = sqrt(area * ratio) // 8 // 2 * 2).
TEST(ImageCondition, TheVideoSizeFollowsImage2Video) {
  const auto hd = wt::wan::image_video_size(1080, 1920, 480 * 832);  // sqrt(399360 * 0.5625) = 473.96
  EXPECT_EQ(hd.height, 464);
  EXPECT_EQ(hd.width, 832);  // sqrt(399360 / 0.5625) = 842.6
  const auto portrait = wt::wan::image_video_size(832, 480, 480 * 832);
  EXPECT_EQ(portrait.height, 832);
  EXPECT_EQ(portrait.width, 480);
  EXPECT_THROW(wt::wan::image_video_size(480, 832, 100), wt::UsageError);  // 100 pixels: no 16 x 16
}

// A last picture of another size is fitted to the first's: scaled to cover
// it, cut around the centre (first_last_frame2video.py); CLIP sees each
// picture on its own, so pictures of two sizes make features side by side.
TEST(ImageCondition, ALastPictureOfAnotherSizeIsFittedAndEachGoesToClipAlone) {
  torch::manual_seed(33);
  // 12 x 40 to cover 24 x 32: scale 2 -> 24 x 80, cut to columns 24..55.
  const auto last = torch::rand({3, 12, 40}) * 2 - 1;
  const auto fitted = wt::wan::cover_picture(last, 24, 32);
  ASSERT_EQ(fitted.sizes(), (std::vector<int64_t>{3, 24, 32}));
  const auto scaled = wt::wan::resize_picture(last, {24, 80});
  EXPECT_TRUE(torch::equal(fitted, scaled.narrow(2, 24, 32)));
  EXPECT_TRUE(torch::equal(wt::wan::cover_picture(fitted, 24, 32), fitted));  // the same size: as it is

  wt::wan::ClipVisionConfig config;
  config.image_size = 28;
  config.dim = 160;
  config.num_heads = 2;
  config.num_layers = 2;
  wt::wan::ClipVision clip(config);
  const auto first = torch::rand({3, 24, 32}) * 2 - 1;
  const auto both = wt::wan::image_clip_features(*clip, first, last);
  ASSERT_EQ(both.sizes(), (std::vector<int64_t>{2 * config.tokens(), 160}));
  EXPECT_TRUE(torch::equal(both.narrow(0, 0, config.tokens()), clip->features(first.unsqueeze(0))[0]));
  EXPECT_TRUE(torch::equal(both.narrow(0, config.tokens(), config.tokens()), clip->features(last.unsqueeze(0))[0]));
}

}  // namespace vae_reference
