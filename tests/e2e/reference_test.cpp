// WanModel against tests/reference/wan_reference.py: an independent PyTorch
// evaluation of the official Wan2.1 forward pass (complex-number RoPE, einsum
// unpatchify), run by the torch wheel's PyTorch on the same weights and inputs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

struct Case {
  const char* name;
  const char* config_json;
  std::array<int64_t, 3> latent_fhw;
  int64_t context_len;
  double vace_scale = 1.0;        // a vace model's context scale
  bool reference_latents = true;  // a ref_conv model: full_ref given (else zeros on both sides)
};

// How the timesteps reach each side: one per sample to both; one per token
// to both, the first latent frame's at 0 (Wan2.2's TI2V, textimage2video.py);
// or one per sample to wantrain and the same repeated per token to the
// reference (Wan2.2 expands a [B] t so).
enum class Timesteps { PerSample, FirstFrameAtZero, PerSampleAgainstRepeated };

void expect_matches_reference(const Case& c, Timesteps timesteps = Timesteps::PerSample) {
  SCOPED_TRACE(c.name);
  const std::string dir = wt::testing::fresh(std::string("reference-") + c.name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << c.config_json;
  const auto config = wt::wan::load_model_config(dir + "/config.json");
  torch::manual_seed(21);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  // Random values everywhere (Wan zero-initialises some): every weight matters.
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  wt::wan::save_weights(*model, dir + "/weights.safetensors");

  const auto [f, h, w] = c.latent_fhw;
  const int64_t cy = config.condition_channels();
  const auto x = torch::randn({2, config.in_dim - cy, f, h, w});           // [B, C, F, H, W]
  auto t = torch::tensor({37.5f, 912.0f});                                 // [B]
  const auto context = torch::randn({2, c.context_len, config.text_dim});  // [B, Lc, D]
  const int64_t frame_tokens = (h / config.patch_size[1]) * (w / config.patch_size[2]);
  const int64_t tokens = (f / config.patch_size[0]) * frame_tokens;
  auto reference_t = t;
  if (timesteps != Timesteps::PerSample) {
    reference_t = t.view({2, 1}).repeat({1, tokens});  // [B, L]
    if (timesteps == Timesteps::FirstFrameAtZero) {
      reference_t.slice(1, 0, frame_tokens).zero_();
      t = reference_t;
    }
  }
  wt::io::NamedTensors inputs{{"x", x}, {"t", reference_t}, {"context", context}};
  wt::wan::ModelCondition image;
  if (config.image_conditioned()) {
    image.y = torch::randn({2, cy, f, h, w});  // [B, 4 + C, F, H, W]
    inputs.emplace_back("y", image.y);
  }
  if (config.image_branch()) {
    image.clip_fea = torch::randn({2, config.condition_images() * config.image_tokens, config.image_dim});
    inputs.emplace_back("clip_fea", image.clip_fea);
  }
  if (config.vace()) {
    image.vace_context = torch::randn({2, config.vace_in_dim, f, h, w});
    image.vace_scale = c.vace_scale;
    inputs.emplace_back("vace_context", image.vace_context);
    inputs.emplace_back("vace_scale", torch::tensor({float(c.vace_scale)}));
  }
  if (config.ref_conv && c.reference_latents) {
    image.full_ref = torch::randn({2, config.out_dim, h, w});
    inputs.emplace_back("full_ref", image.full_ref);
  }
  wt::io::write_safetensors(dir + "/inputs.safetensors", inputs, torch::kFloat32);

  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/wan_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto reference = file.read(*file.find("out"));
  const auto ours = model->forward(x, t, context, image);
  ASSERT_EQ(ours.sizes(), reference.sizes());
  const double scale = reference.abs().max().item<double>();
  const double error = (ours - reference).abs().max().item<double>();
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(error, 1e-4 * scale) << "max |ours - reference| = " << error << " of max |reference| = " << scale;
}

}  // namespace

TEST(WanReference, TinyVideoModelMatchesTheReferenceForwardPass) {
  expect_matches_reference(
      {"tiny",
       R"({"dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 32, "text_dim": 24,
                                "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 4, "out_dim": 6, "eps": 1e-6,
                                "qk_norm": true, "cross_attn_norm": true})",
       {3, 4, 6},
       7});
}

TEST(WanReference, WanHeadDimAndOtherPatchAndNoNormsMatch) {
  // head dim 128 as every Wan release (RoPE parts 44/42/42), a patch over frames, no optional norms
  expect_matches_reference(
      {"wide-heads",
       R"({"dim": 256, "ffn_dim": 64, "num_heads": 2, "num_layers": 1, "freq_dim": 256, "text_dim": 8,
                                "text_len": 4, "patch_size": [2, 1, 2], "in_dim": 3, "out_dim": 3, "eps": 1e-5,
                                "qk_norm": false, "cross_attn_norm": false})",
       {4, 3, 4},
       4});
}

// Wan2.1 I2V: y joined to the noisy latents, CLIP features through img_emb
// into a second attention in every cross-attention (k_img, v_img, norm_k_img).
TEST(WanReference, ImageToVideoWithTheClipBranchMatches) {
  expect_matches_reference(
      {"i2v",
       R"({"model_type": "i2v", "image_dim": 24, "image_tokens": 5, "dim": 64, "ffn_dim": 96, "num_heads": 4,
           "num_layers": 2, "freq_dim": 32, "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 16,
           "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})",
       {3, 4, 6},
       7});
}

// Wan2.1 FLF2V: both pictures' CLIP tokens, told apart by img_emb.emb_pos.
TEST(WanReference, FirstLastFrameToVideoMatches) {
  expect_matches_reference(
      {"flf2v",
       R"({"model_type": "flf2v", "image_dim": 24, "image_tokens": 5, "dim": 64, "ffn_dim": 96, "num_heads": 4,
           "num_layers": 2, "freq_dim": 32, "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 16,
           "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})",
       {3, 4, 6},
       10});
}

// Wan2.2 I2V-A14B: y joined, no CLIP branch; without the optional norms.
TEST(WanReference, Wan22ImageToVideoWithoutClipMatches) {
  expect_matches_reference(
      {"wan22-i2v",
       R"({"model_type": "i2v", "dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 32,
           "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 16, "out_dim": 6, "eps": 1e-5,
           "qk_norm": false, "cross_attn_norm": false})",
       {2, 4, 4},
       3});
}

// Wan2.2's TI2V-5B: a timestep per token, 0 on the first latent frame's
// tokens (the kept picture), with its own time embedding and modulation in
// every block and the head.
TEST(WanReference, Wan22PerTokenTimestepsWithTheFirstFrameAtZeroMatch) {
  expect_matches_reference(
      {"ti2v",
       R"({"model_type": "ti2v", "dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 32,
           "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 6, "out_dim": 6, "eps": 1e-6,
           "qk_norm": true, "cross_attn_norm": true})",
       {3, 4, 6},
       7},
      Timesteps::FirstFrameAtZero);
}

// A [B] timestep is the official model's [B] expanded to every token.
TEST(WanReference, OneTimestepPerSampleMatchesItRepeatedPerToken) {
  expect_matches_reference(
      {"repeated-t",
       R"({"model_type": "ti2v", "dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 32,
           "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 6, "out_dim": 6, "eps": 1e-6,
           "qk_norm": true, "cross_attn_norm": true})",
       {2, 4, 4},
       5},
      Timesteps::PerSampleAgainstRepeated);
}

// One step of Wan2.2 TI2V sampling from a picture: wantrain's Euler sampler
// with a first frame against tests/reference/ti2v_step_reference.py, which
// takes the step as textimage2video.py's loop does (the picture's latents
// in frame 0, per-token timesteps from the mask, guidance, the update, frame
// 0 put back) over the reference forward pass, with Euler as the solver.
TEST(WanReference, Wan22Ti2vSamplingStepMatchesTheOfficialLoop) {
  const std::string dir = wt::testing::fresh("reference-ti2v-step");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "ti2v", "dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 32,
             "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 6, "out_dim": 6, "eps": 1e-6,
             "qk_norm": true, "cross_attn_norm": true})";
  const auto config = wt::wan::load_model_config(dir + "/config.json");
  torch::manual_seed(23);
  wt::wan::WanModel model(config);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  wt::wan::save_weights(*model, dir + "/weights.safetensors");
  const auto noise = torch::randn({1, 6, 3, 4, 6});
  const auto z = torch::randn({1, 6, 1, 4, 6});
  const auto context = torch::randn({1, 7, 24});
  // One Euler step of a 1-step schedule: sigma 1 -> 0.
  wt::wan::SamplerOptions options;
  options.solver = wt::wan::Solver::Euler;
  options.steps = 1;
  options.shift = 5.0;
  options.cfg = 3.5;
  options.first_frame = z;
  const auto sigmas = wt::wan::sampling_sigmas(options.steps, options.shift);
  wt::io::write_safetensors(dir + "/inputs.safetensors",
                            {{"noise", noise},
                             {"z", z},
                             {"context", context},
                             {"sigmas", torch::tensor({float(sigmas[0]), float(sigmas[1])})},
                             {"cfg", torch::tensor({float(options.cfg)})}},
                            torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/ti2v_step_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto reference = file.read(*file.find("latent"));
  const auto uncond = torch::zeros_like(context);
  wt::wan::VelocityField velocity = [&](const at::Tensor& x, const at::Tensor& t, bool conditional) {
    return model->forward(x, t, conditional ? context : uncond);
  };
  const auto ours = wt::wan::sample_flow(noise, velocity, options);
  ASSERT_EQ(ours.sizes(), reference.sizes());
  EXPECT_TRUE(torch::equal(ours.slice(2, 0, 1), z));  // frame 0 is the picture's, exactly
  const double scale = reference.abs().max().item<double>(), error = (ours - reference).abs().max().item<double>();
  EXPECT_LT(error, 1e-4 * scale) << "max |ours - reference| = " << error << " of max |reference| = " << scale;
}

// Wan2.1-VACE (the official VaceWanModel): the reference runs every VACE
// block first and holds the hints, wantrain runs each just before its hint
// is added. The official default layout (every second block, from the
// config without vace_layers), and a layout of its own with a context scale
// other than 1 and a context narrower than the releases' 96 channels.
TEST(WanReference, VaceModelWithTheOfficialLayoutMatches) {
  expect_matches_reference(
      {"vace-default",
       R"({"dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 4, "freq_dim": 32, "text_dim": 24,
           "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 4, "out_dim": 4, "eps": 1e-6,
           "qk_norm": true, "cross_attn_norm": true, "model_type": "vace", "vace_in_dim": 12})",
       {3, 4, 6},
       7});
}

TEST(WanReference, VaceModelWithOtherLayersAndAContextScaleMatches) {
  expect_matches_reference(
      {"vace-layers",
       R"({"dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 5, "freq_dim": 32, "text_dim": 24,
           "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 4, "out_dim": 4, "eps": 1e-6,
           "qk_norm": false, "cross_attn_norm": true, "model_type": "vace", "vace_layers": [0, 1, 4],
           "vace_in_dim": 7})",
       {2, 6, 4},
       5,
       0.6});
}

// VideoX-Fun's Wan2.1-Fun-Control (wan_transformer3d.py): an i2v model with
// in_dim 3 out_dim, y the control's and the start frame's latents, the CLIP
// branch; V1.1 adds ref_conv, the reference picture's tokens put first (RoPE
// frame 0) and cut off after the head: given, with a timestep per sample,
// and absent (zeros) with a timestep per token, padded at the front.
TEST(WanReference, FunControlModelMatches) {
  expect_matches_reference(
      {"fun-control",
       R"({"model_type": "i2v", "image_dim": 24, "image_tokens": 5, "dim": 64, "ffn_dim": 96, "num_heads": 4,
           "num_layers": 2, "freq_dim": 32, "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 18,
           "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})",
       {3, 4, 6},
       7});
}

TEST(WanReference, FunControlWithAReferencePictureMatches) {
  const char* config =
      R"({"model_type": "i2v", "image_dim": 24, "image_tokens": 5, "dim": 64, "ffn_dim": 96, "num_heads": 4,
          "num_layers": 2, "freq_dim": 32, "text_dim": 24, "text_len": 10, "patch_size": [1, 2, 2], "in_dim": 18,
          "out_dim": 6, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true, "add_ref_conv": true,
          "in_dim_ref_conv": 6, "add_control_adapter": false})";
  expect_matches_reference({"fun-control-ref", config, {3, 4, 6}, 7});
  expect_matches_reference({"fun-control-zero-ref", config, {2, 4, 4}, 5, 1.0, false}, Timesteps::FirstFrameAtZero);
}
