// wantrain against diffusers itself (tests/peers/diffusers_transformer.py):
// diffusers' WanTransformer3DModel, built from a config with random weights
// and saved by save_pretrained in shards into a pipeline folder, is read by
// wantrain from that folder alone (its config.json gives the WanConfig, its
// index the shards, diffusers' names mapped), and both forwards agree. Then
// wansample samples from the folder with no --model-config: one Euler step
// from pure noise lands on noise - v, v diffusers' own velocity.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/sample_shard.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/encoders/t5_tokenizer.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"
#include "wantrain/wan/vae/vae_tiling.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace {

// A small WanTransformer3DModel config.json: `in` and `out` latent channels,
// and the image branch's keys (JSON members).
std::string small_transformer(int64_t in, int64_t out,
                              const std::string& image = R"("image_dim": null, "added_kv_proj_dim": null)") {
  return fmt::format(
      R"({{"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 4,
          "attention_head_dim": 16, "in_channels": {}, "out_channels": {}, "text_dim": 32, "freq_dim": 256,
          "ffn_dim": 96, "num_layers": 2, "cross_attn_norm": true, "qk_norm": "rms_norm_across_heads", "eps": 1e-6,
          "rope_max_seq_len": 1024, {}}})",
      in, out, image);
}

struct Peer {
  const char* name;
  std::string diffusers_config;  // WanTransformer3DModel's config.json
  wt::wan::ModelType type;       // what wantrain must read it as
  bool per_token_timesteps = false;
};

// Runs tests/peers/SCRIPT with `args` under the torch wheel's python, the venv the peers are installed in.
wt::testing::Job run_peer(const std::string& script, const std::string& args) {
  return wt::testing::launch(std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/peers/" + script + " " +
                             args);
}

constexpr int64_t kF = 2, kH = 4, kW = 4, kContext = 6;

// The maximum of |a - b| against the maximum of |b|, which must be no tiny number.
void expect_close(const at::Tensor& ours, const at::Tensor& theirs, const char* what) {
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  const double scale = theirs.abs().max().item<double>();
  const double error = (ours - theirs).abs().max().item<double>();
  EXPECT_GT(scale, 0.1) << what;
  EXPECT_LT(error, 1e-4 * scale) << what << ": max |wantrain - diffusers| = " << error << " of " << scale;
}

// Random inputs of a `config` model, written to DIR/inputs.safetensors for the peer.
struct Inputs {
  at::Tensor x, t, context;
  wt::wan::ModelCondition image;
};
Inputs write_inputs(const wt::wan::WanConfig& config, bool per_token_timesteps, const std::string& dir) {
  Inputs in;
  const int64_t cy = config.condition_channels();
  torch::manual_seed(3);
  in.x = torch::randn({2, config.in_dim - cy, kF, kH, kW});
  in.t = torch::tensor({37.5f, 912.0f});
  in.context = torch::randn({2, kContext, config.text_dim});
  wt::io::NamedTensors named{{"x", in.x}, {"context", in.context}};
  if (config.image_conditioned()) {
    in.image.y = torch::randn({2, cy, kF, kH, kW});
    named.emplace_back("y", in.image.y);
  }
  if (config.image_branch()) {
    in.image.clip_fea = torch::randn({2, config.condition_images() * config.image_tokens, config.image_dim});
    named.emplace_back("clip_fea", in.image.clip_fea);
  }
  if (config.vace()) {
    in.image.vace_context = torch::randn({2, config.vace_in_dim, kF, kH, kW});
    in.image.vace_scale = 0.7;
    named.emplace_back("vace_context", in.image.vace_context);
    named.emplace_back("vace_scale", torch::tensor({0.7f}));
  }
  if (per_token_timesteps) {  // TI2V: the first latent frame's tokens at timestep 0
    const int64_t frame_tokens = (kH / 2) * (kW / 2);
    in.t = in.t.view({2, 1}).repeat({1, kF * frame_tokens});
    in.t.slice(1, 0, frame_tokens).zero_();
  }
  named.emplace_back("t", in.t);
  wt::io::write_safetensors(dir + "/inputs.safetensors", named, torch::kFloat32);
  return in;
}

// wantrain's forward of the model in diffusers folder `root`, read from it alone.
at::Tensor forward_from_folder(const std::string& root, const Inputs& in) {
  const auto config = wt::wan::load_model_config(root);
  wt::wan::WanModel model(config, at::kFloat, wt::wan::WanInit::Empty);
  const auto report = wt::wan::load_weights(*model, wt::wan::open_weights(root));
  EXPECT_TRUE(report.diffusers_names);
  model->eval();
  torch::NoGradGuard no_grad;
  return model->forward(in.x, in.t, in.context, in.image);
}

void expect_matches_diffusers(const Peer& peer) {
  SCOPED_TRACE(peer.name);
  const std::string dir = wt::testing::fresh(std::string("diffusers-") + peer.name);
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json") << peer.diffusers_config;
  // The inputs, made here: the peer reads them.
  const auto config_text = wt::wan::load_model_config(dir + "/config.json");  // diffusers' keys, read as ours
  EXPECT_EQ(config_text.model_type, peer.type);
  const auto in = write_inputs(config_text, peer.per_token_timesteps, dir);
  const auto& x = in.x;
  const auto job = run_peer("diffusers_transformer.py", dir + "/config.json " + root + " " + dir +
                                                            "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  ASSERT_TRUE(std::filesystem::exists(root + "/transformer/diffusion_pytorch_model.safetensors.index.json"))
      << "the peer was to save shards";

  // The pipeline's root folder alone: config and weights from its transformer/.
  const auto config = wt::wan::load_model_config(root);
  EXPECT_EQ(wt::wan::first_difference(config, config_text), "");
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  expect_close(forward_from_folder(root, in), file.read(*file.find("out")), "forward");

  if (config.image_conditioned() || config.vace() || peer.per_token_timesteps) return;
  // wansample from the folder: one Euler step from the noise at timestep 1000.
  const auto sample = wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + root + " --text " + dir +
                                          "/text.h5 --frames " + std::to_string(kF) + " --size " + std::to_string(kH) +
                                          "x" + std::to_string(kW) + " --noise " + dir +
                                          "/noise.h5 --solver euler --steps 1 --cfg 1 --out " + dir + "/one-step.h5");
  ASSERT_EQ(sample.status, 0) << sample.output;
  const auto latents = wt::testing::sampled_latents(dir + "/one-step.h5");
  expect_close(x[0] - latents, file.read(*file.find("v1000"))[0], "wansample's step");
  // diffusers' WanPipeline's whole loop (its flow UniPC scheduler, guidance
  // 5, 10 steps, the same noise through latents=): wansample on diffusers'
  // schedule lands where it does. The release's schedule differs from it
  // by a few timesteps, which this random model shows plainly.
  const auto pipeline = run_peer("diffusers_pipeline.py", root + " " + dir + "/noise.h5 " + dir + "/text.h5 10 5 5 " +
                                                              dir + "/pipeline.safetensors");
  ASSERT_EQ(pipeline.status, 0) << pipeline.output;
  const auto pipeline_file = wt::io::SafetensorsFile::open(dir + "/pipeline.safetensors");
  const auto theirs = pipeline_file.read(*pipeline_file.find("latents"));
  for (const std::string schedule : {"diffusers", "release"}) {
    const auto ours = wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + root + " --text " + dir +
                                          "/text.h5 --frames 2 --size 4x4 --noise " + dir +
                                          "/noise.h5 --solver unipc --steps 10 --cfg 5 --shift 5 --schedule " +
                                          schedule + " --out " + dir + "/" + schedule + ".h5");
    ASSERT_EQ(ours.status, 0) << ours.output;
    const double error =
        (wt::testing::sampled_latents(dir + "/" + schedule + ".h5") - theirs).abs().max().item<double>() /
        theirs.abs().max().item<double>();
    if (schedule == "diffusers")
      EXPECT_LT(error, 1e-3) << "wansample --schedule diffusers against WanPipeline";
    else
      EXPECT_GT(error, 1e-3) << "the release's schedule is not diffusers'";
  }
  // A --model-config that the folder's config.json contradicts, and a folder
  // with no model: one line each, status 2, nothing written.
  const std::string tiny = std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/wan-tiny.json";
  const std::string common = " --text " + dir + "/text.h5 --frames 2 --size 4x4 --steps 1 --out " + dir + "/bad.h5";
  const auto conflict =
      wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + root + " --model-config " + tiny + common);
  EXPECT_EQ(conflict.status, 2) << conflict.output;
  EXPECT_EQ(wt::testing::occurrences(conflict.output, "option --model-config: " + tiny + " and " + root +
                                                          "/transformer/config.json differ: ffn_dim: 128 vs 96"),
            1u)
      << conflict.output;
  std::filesystem::create_directories(dir + "/empty");
  const auto empty = wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + dir + "/empty" + common);
  EXPECT_EQ(empty.status, 2) << empty.output;
  EXPECT_EQ(wt::testing::occurrences(empty.output, dir + "/empty: a folder with no model in it"), 1u) << empty.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.h5"));
}

}  // namespace

TEST(DiffusersPeer, TextToVideoFolderLoadsAndSamplesAsDiffusers) {
  expect_matches_diffusers({"t2v", small_transformer(16, 16), wt::wan::ModelType::T2V});
}

// Wan2.1 I2V: y joined; CLIP features through the image embedder into
// cross-attention's added key and value projections.
TEST(DiffusersPeer, ImageToVideoWithTheClipBranchMatches) {
  expect_matches_diffusers(
      {"i2v", small_transformer(36, 16, R"("image_dim": 1280, "added_kv_proj_dim": 64)"), wt::wan::ModelType::I2V});
}

// Wan2.1 FLF2V: two pictures' CLIP tokens with their position embedding.
TEST(DiffusersPeer, FirstLastFrameToVideoMatches) {
  expect_matches_diffusers(
      {"flf2v", small_transformer(36, 16, R"("image_dim": 1280, "added_kv_proj_dim": 64, "pos_embed_seq_len": 514)"),
       wt::wan::ModelType::FLF2V});
}

// Wan2.2 I2V-A14B's expert: y joined, no CLIP branch.
TEST(DiffusersPeer, Wan22ImageToVideoExpertMatches) {
  expect_matches_diffusers({"wan22-i2v", small_transformer(36, 16), wt::wan::ModelType::I2V});
}

// Wan2.2 TI2V-5B: 48 latent channels, a timestep per token (the first frame's at 0).
TEST(DiffusersPeer, Wan22Ti2vWithPerTokenTimestepsMatches) {
  expect_matches_diffusers({"ti2v", small_transformer(48, 48), wt::wan::ModelType::TI2V, true});
}

// Wan2.1-VACE as diffusers keeps it (WanVACETransformer3DModel: proj_in and
// proj_out for the official before_proj and after_proj, vace_in_channels),
// hints after blocks 0 and 2 of 3, every layer's scale 0.7.
TEST(DiffusersPeer, VaceFolderLoadsAndMatches) {
  expect_matches_diffusers(
      {"vace",
       R"({"_class_name": "WanVACETransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 4,
           "attention_head_dim": 16, "in_channels": 16, "out_channels": 16, "text_dim": 32, "freq_dim": 256,
           "ffn_dim": 96, "num_layers": 3, "cross_attn_norm": true, "qk_norm": "rms_norm_across_heads",
           "eps": 1e-6, "rope_max_seq_len": 1024, "image_dim": null, "added_kv_proj_dim": null,
           "vace_layers": [0, 2], "vace_in_channels": 12})",
       wt::wan::ModelType::VACE});
}

// The way out: wantrain export --format diffusers writes a folder that
// diffusers' from_pretrained loads with every tensor in place (the peer
// fails otherwise), in shards past --max-shard-size, and diffusers' forward
// of it equals wantrain's. A model diffusers cannot express is one line.
TEST(DiffusersPeer, ExportedFolderLoadsInDiffusersAndMatches) {
  const std::string dir = wt::testing::fresh("diffusers-export");
  std::filesystem::create_directories(dir);
  for (const auto& [name, config_json] :
       {std::pair{"t2v", R"({"dim": 64, "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 256,
                             "text_dim": 32, "text_len": 512, "patch_size": [1, 2, 2], "in_dim": 16, "out_dim": 16,
                             "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})"},
        {"flf2v", R"({"model_type": "flf2v", "image_dim": 1280, "dim": 64, "ffn_dim": 96, "num_heads": 4,
                      "num_layers": 2, "freq_dim": 256, "text_dim": 32, "text_len": 512, "patch_size": [1, 2, 2],
                      "in_dim": 36, "out_dim": 16, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})"},
        std::pair{"vace", R"({"model_type": "vace", "vace_layers": [0, 1], "vace_in_dim": 96, "dim": 64,
                             "ffn_dim": 96, "num_heads": 4, "num_layers": 2, "freq_dim": 256, "text_dim": 32,
                             "text_len": 512, "patch_size": [1, 2, 2], "in_dim": 16, "out_dim": 16, "eps": 1e-6,
                             "qk_norm": true, "cross_attn_norm": true})"}}) {
    SCOPED_TRACE(name);
    const std::string config_path = dir + "/" + name + ".json", out = dir + "/" + name;
    std::ofstream(config_path) << config_json;
    const auto exported =
        wt::testing::launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " + config_path +
                            " --seed 3 --random-head --format diffusers --max-shard-size 0.0001 --out " + out);
    ASSERT_EQ(exported.status, 0) << exported.output;
    EXPECT_EQ(wt::testing::occurrences(exported.output, "a diffusers folder " + out + "/transformer in "), 1u)
        << exported.output;
    ASSERT_TRUE(std::filesystem::exists(out + "/transformer/diffusion_pytorch_model.safetensors.index.json"));
    const auto config = wt::wan::load_model_config(config_path);
    EXPECT_EQ(wt::wan::first_difference(wt::wan::load_model_config(out), config), "");
    const auto in = write_inputs(config, false, dir);
    const auto job = run_peer("diffusers_transformer.py",
                              "--load " + out + " " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
    ASSERT_EQ(job.status, 0) << job.output;
    const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
    expect_close(forward_from_folder(out, in), file.read(*file.find("out")), "forward");
  }
  const auto refused =
      wt::testing::launch(std::string(WANTRAIN_WANTRAIN) + " export --model-config " + WANTRAIN_SOURCE_DIR +
                          "/data/configs/wan-tiny.json --format diffusers --out " + dir + "/tiny");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(wt::testing::occurrences(refused.output, "would differ in text_len: 512 vs 16"), 1u) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/tiny/transformer/config.json"));
}

// Wan2.2 A14B as diffusers keeps it: transformer/ (high noise) and
// transformer_2/ (low noise) under one pipeline folder, model_index.json
// holding boundary_ratio. wansample takes both experts and the boundary
// from the folder alone, and its sample is WanPipeline's.
TEST(DiffusersPeer, TwoExpertFolderSamplesAsWanPipeline) {
  const std::string dir = wt::testing::fresh("diffusers-experts");
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json") << small_transformer(16, 16);
  // 0.9: at 10 steps and shift 5 the first 5 steps (t 999 .. 921) are the high-noise expert's.
  const auto made = run_peer("diffusers_experts.py", dir + "/config.json " + root + " 0.9");
  ASSERT_EQ(made.status, 0) << made.output;
  // The noise and text, as the one-model tests write them.
  const auto config = wt::wan::load_model_config(root);
  write_inputs(config, false, dir);
  const auto job = run_peer("diffusers_transformer.py", "--load " + root + " " + dir + "/inputs.safetensors " + dir +
                                                            "/out.safetensors");  // writes noise.h5, text.h5
  ASSERT_EQ(job.status, 0) << job.output;
  const auto pipeline = run_peer("diffusers_pipeline.py", root + " " + dir + "/noise.h5 " + dir + "/text.h5 10 5 5 " +
                                                              dir + "/pipeline.safetensors");
  ASSERT_EQ(pipeline.status, 0) << pipeline.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/pipeline.safetensors");
  const auto theirs = file.read(*file.find("latents"));
  const auto ours = wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + root + " --text " + dir +
                                        "/text.h5 --frames 2 --size 4x4 --noise " + dir +
                                        "/noise.h5 --solver unipc --schedule diffusers --steps 10 --cfg 5 --shift 5 "
                                        "--out " +
                                        dir + "/experts.h5");
  ASSERT_EQ(ours.status, 0) << ours.output;
  EXPECT_EQ(wt::testing::occurrences(ours.output,
                                     "two experts, transformer/ the high-noise one and transformer_2/ "
                                     "the low-noise one, boundary_ratio 0.9 (model_index.json)"),
            1u)
      << ours.output;
  EXPECT_EQ(wt::testing::occurrences(ours.output, "the high-noise one from t = 900 (boundary 0.9)"), 1u) << ours.output;
  const auto latents = wt::testing::sampled_latents(dir + "/experts.h5");
  const double error = (latents - theirs).abs().max().item<double>() / theirs.abs().max().item<double>();
  EXPECT_LT(error, 1e-3) << "wansample's two experts against WanPipeline's";
  // Each expert matters: the high-noise expert alone samples another video.
  const auto alone =
      wt::testing::launch(std::string(WANTRAIN_WANSAMPLE) + " --weights " + root + "/transformer --text " + dir +
                          "/text.h5 --frames 2 --size 4x4 --noise " + dir +
                          "/noise.h5 --solver unipc --schedule diffusers --steps 10 --cfg 5 "
                          "--shift 5 --out " +
                          dir + "/alone.h5");
  ASSERT_EQ(alone.status, 0) << alone.output;
  EXPECT_GT((wt::testing::sampled_latents(dir + "/alone.h5") - theirs).abs().max().item<double>(),
            1e-2 * theirs.abs().max().item<double>());
}

// A LoRA trained by wantrain on a diffusers folder, exported with
// diffusers' names, loads with WanPipeline.load_lora_weights (every adapter
// finds its layer, through peft), and diffusers' adapted forward equals
// wantrain's with the same file merged (what wansample --lora does).
TEST(DiffusersPeer, AWantrainLoraLoadsInDiffusersAsInWansample) {
  const std::string dir = wt::testing::fresh("diffusers-lora");
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json") << small_transformer(16, 16);
  const auto in = write_inputs(wt::wan::load_model_config(dir + "/config.json"), false, dir);
  const auto made = run_peer("diffusers_transformer.py", dir + "/config.json " + root + " " + dir +
                                                             "/inputs.safetensors " + dir + "/base.safetensors");
  ASSERT_EQ(made.status, 0) << made.output;
  // A few LoRA steps on the folder, at a rate that moves the adapters.
  const auto data = wt::testing::launch(std::string(WANTRAIN_WANDATA) + " synth --out " + dir +
                                        "/data --samples 4 --shards 1 --frames 2 --size 4x4 --text-len 16 "
                                        "--text-dim 32");
  ASSERT_EQ(data.status, 0) << data.output;
  const auto run = wt::testing::launch(std::string(WANTRAIN_WANTRAIN) + " --model-config " + root + " --init " + root +
                                       " --data " + dir + "/data --output-dir " + dir +
                                       "/run --steps 3 --lr 1e-2 --batch-size 1 --threads 1 --lora-rank 4");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto exported = wt::testing::launch(std::string(WANTRAIN_WANTRAIN) + " export --checkpoint " + dir +
                                            "/run/latest --names diffusers --out " + dir + "/lora.safetensors");
  ASSERT_EQ(exported.status, 0) << exported.output;
  const auto job = run_peer("diffusers_lora.py", root + " " + dir + "/lora.safetensors " + dir +
                                                     "/inputs.safetensors " + dir + "/adapted.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto adapted_file = wt::io::SafetensorsFile::open(dir + "/adapted.safetensors");
  const auto theirs = adapted_file.read(*adapted_file.find("out"));

  const auto config = wt::wan::load_model_config(root);
  wt::wan::WanModel model(config, at::kFloat, wt::wan::WanInit::Empty);
  wt::wan::load_weights(*model, wt::wan::open_weights(root));
  EXPECT_EQ(wt::wan::merge_lora_file(*model, dir + "/lora.safetensors", 1.0),
            20);  // q k v o of both attentions, ffn's two
  model->eval();
  torch::NoGradGuard no_grad;
  expect_close(model->forward(in.x, in.t, in.context, in.image), theirs, "the adapted forward");
  // The adapters matter: diffusers' output without them is another.
  const auto base_file = wt::io::SafetensorsFile::open(dir + "/base.safetensors");
  EXPECT_GT((base_file.read(*base_file.find("out")) - theirs).abs().max().item<double>(),
            1e-3 * theirs.abs().max().item<double>());
}

// A VAE as diffusers keeps it (AutoencoderKLWan, vae/ of a pipeline) of
// config `config_json`: wantrain reads the pipeline's root folder alone
// (config.json gives the shape, the names are mapped), and encodes `video`
// and decodes `latents` as diffusers' own model does, normalised as
// WanPipeline normalises. Then both again with `tiling` (tile height, width,
// stride height, width, in diffusers' units) on `tiled_video` and
// `tiled_latents`, larger than a tile, against enable_tiling's: uneven
// edge tiles, blends along both axes; and the untiled pass is unchanged.
struct TiledCase {
  std::vector<int64_t> tiling;
  at::Tensor video, latents;
};
void expect_vae_matches_diffusers(const std::string& name, const std::string& config_json, const at::Tensor& video,
                                  const at::Tensor& latents, int64_t spatial_factor, const TiledCase& tiled) {
  const std::string dir = wt::testing::fresh(name);
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json") << config_json;
  const auto tiling = torch::tensor(tiled.tiling, torch::kFloat);
  wt::io::write_safetensors(dir + "/inputs.safetensors",
                            {{"video", video},
                             {"latents", latents},
                             {"tiling", tiling},
                             {"tiled_video", tiled.video},
                             {"tiled_latents", tiled.latents}},
                            torch::kFloat32);
  const auto job = run_peer(
      "diffusers_vae.py", dir + "/config.json " + root + " " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto vae = wt::wan::open_video_vae(root);
  EXPECT_EQ(vae->z_dim(), latents.size(1));
  EXPECT_EQ(vae->spatial_factor(), spatial_factor);
  torch::NoGradGuard no_grad;
  const auto encoded = vae->encode(video), decoded = vae->decode(latents);
  expect_close(encoded, file.read(*file.find("latents")), "encode");
  const auto theirs = file.read(*file.find("decoded"));
  EXPECT_LT((theirs.abs() == 1).to(torch::kFloat).mean().item<double>(), 0.1);  // few values at the clamp
  expect_close(decoded, theirs, "decode");

  const auto whole_encoded = vae->encode(tiled.video), whole_decoded = vae->decode(tiled.latents);
  vae->set_tiling(wt::wan::VaeTiling{tiled.tiling[0], tiled.tiling[1], tiled.tiling[2], tiled.tiling[3]});
  ASSERT_TRUE(wt::wan::encode_is_tiled(*vae, *vae->tiling(), tiled.video.size(3), tiled.video.size(4)));
  ASSERT_TRUE(wt::wan::decode_is_tiled(*vae, *vae->tiling(), tiled.latents.size(3), tiled.latents.size(4)));
  const auto tiled_encoded = vae->encode(tiled.video), tiled_decoded = vae->decode(tiled.latents);
  expect_close(tiled_encoded, file.read(*file.find("tiled_encoded")), "tiled encode");
  expect_close(tiled_decoded, file.read(*file.find("tiled_decoded")), "tiled decode");
  // Tiles are not the whole frame: the comparison above sees the blending.
  EXPECT_GT((tiled_encoded - whole_encoded).abs().max().item<double>(), 1e-3);
  EXPECT_GT((tiled_decoded - whole_decoded).abs().max().item<double>(), 1e-3);
  // A video that fits in one tile is the untiled pass, bit for bit.
  EXPECT_TRUE(torch::equal(vae->encode(video), encoded));
  EXPECT_TRUE(torch::equal(vae->decode(latents), decoded));
}

TEST(DiffusersPeer, Wan21VaeFolderEncodesAndDecodesAsAutoencoderKLWan) {
  torch::manual_seed(4);
  const auto video = torch::rand({1, 3, 9, 24, 32}) * 2 - 1;  // 9 frames: the first, then two chunks of 4
  // Tiles of 48 pixels, stride 32: 6 latents, stride 4; a batch of 2 frames of 64x72, whose edge tiles (8
  // pixels, 1 latent) are narrower than the blends (16 pixels, 2 latents).
  expect_vae_matches_diffusers(
      "diffusers-vae",
      R"({"_class_name": "AutoencoderKLWan", "base_dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2],
          "num_res_blocks": 1, "attn_scales": [], "temperal_downsample": [false, true, true], "dropout": 0.0,
          "latents_mean": [0.1, -0.2, 0.3, 0.0], "latents_std": [1.5, 0.5, 2.0, 1.0]})",
      video, torch::randn({1, 4, 3, 3, 4}), 8,
      {{48, 48, 32, 32}, torch::rand({2, 3, 9, 64, 72}) * 2 - 1, torch::randn({2, 4, 3, 8, 9})});
}

// Wan2.2's VAE (TI2V-5B's) as diffusers keeps it: is_residual, 2x2 patches,
// a decoder of its own width, each level a block of resnets and a resampler.
TEST(DiffusersPeer, Wan22VaeFolderEncodesAndDecodesAsAutoencoderKLWan) {
  torch::manual_seed(5);
  const auto video = torch::rand({1, 3, 9, 32, 32}) * 2 - 1;
  // Tiles of 32 (patched) pixels, stride 16: encode tiles of 64 pixels, decode tiles of 2 latents, blends of
  // 8 patches of 2x2.
  expect_vae_matches_diffusers(
      "diffusers-vae22",
      R"({"_class_name": "AutoencoderKLWan", "base_dim": 8, "decoder_base_dim": 12, "z_dim": 4,
          "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1, "attn_scales": [], "temperal_downsample": [false, true, true],
          "dropout": 0.0, "is_residual": true, "in_channels": 12, "out_channels": 12, "patch_size": 2,
          "scale_factor_spatial": 16, "scale_factor_temporal": 4,
          "latents_mean": [0.1, -0.2, 0.3, 0.0], "latents_std": [1.5, 0.5, 2.0, 1.0]})",
      video, torch::randn({1, 4, 3, 2, 2}), 16,
      {{32, 32, 16, 16}, torch::rand({1, 3, 9, 96, 112}) * 2 - 1, torch::randn({1, 4, 3, 5, 6})});
}

// umT5 as a diffusers pipeline keeps it (transformers' UMT5EncoderModel in
// text_encoder/): wantrain reads the root folder alone (config.json gives
// the shape, transformers' names are mapped) and encodes the same token ids
// as transformers' own model, at every token of each prompt.
TEST(DiffusersPeer, Umt5TextEncoderFolderEncodesAsTransformers) {
  const std::string dir = wt::testing::fresh("diffusers-umt5");
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json")
      << R"({"vocab_size": 300, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2, "num_heads": 4,
             "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
             "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new", "is_gated_act": true,
             "tie_word_embeddings": false})";
  torch::manual_seed(6);
  const auto ids = torch::randint(2, 300, {2, 40}, torch::kInt64);  // 40 tokens: positions past the exact buckets
  auto mask = torch::ones({2, 40}, torch::kInt64);
  mask[1].slice(0, 25).zero_();  // the second prompt is 25 tokens, then padding
  wt::io::write_safetensors(dir + "/inputs.safetensors", {{"ids", ids}, {"mask", mask}}, torch::kFloat32);  // exact
  const auto job = run_peer(
      "umt5_encoder.py", dir + "/config.json " + root + " " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto folder = wt::wan::text_encoder_folder(root);
  ASSERT_TRUE(folder.has_value());
  wt::wan::T5Encoder encoder(wt::wan::hugging_face_t5_config(folder->config));
  wt::wan::load_weights(*encoder, wt::wan::open_t5_weights(root));
  encoder->eval();
  torch::NoGradGuard no_grad;
  const auto ours = encoder->forward(ids, mask);
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto theirs = file.read(*file.find("out"));
  expect_close(ours[0], theirs[0], "the full prompt");
  expect_close(ours[1].slice(0, 0, 25), theirs[1].slice(0, 0, 25), "the padded prompt's tokens");
}

// CLIP as a diffusers image-to-video pipeline keeps it (transformers'
// CLIPVisionModel in image_encoder/): wantrain reads the root folder alone
// (config.json gives the heads, which the tensors cannot tell) and its
// features are transformers' hidden states before the last layer, the ones
// WanImageToVideoPipeline hands the transformer. A config.json of another
// activation is refused in one line.
TEST(DiffusersPeer, ClipImageEncoderFolderGivesTransformersPenultimateFeatures) {
  const std::string dir = wt::testing::fresh("diffusers-clip");
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  std::ofstream(dir + "/config.json")
      << R"({"hidden_size": 32, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 3,
             "image_size": 28, "patch_size": 14, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
             "projection_dim": 16})";
  torch::manual_seed(8);
  const auto images = torch::rand({2, 3, 28, 28}) * 2 - 1;  // at image_size: no resize
  wt::io::write_safetensors(dir + "/inputs.safetensors", {{"images", images}}, torch::kFloat32);
  const auto job = run_peer(
      "clip_vision.py", dir + "/config.json " + root + " " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto clip = wt::wan::load_clip_vision(root);
  EXPECT_EQ(clip->config().num_heads, 4);  // from config.json: 32 channels are no ViT-H heads of 80
  EXPECT_EQ(clip->config().num_layers, 3);
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  expect_close(clip->features(images), file.read(*file.find("features")), "features");

  const std::string config = root + "/image_encoder/config.json";
  auto doc = nlohmann::json::parse(std::ifstream(config));
  doc["hidden_act"] = "quick_gelu";
  std::ofstream(config) << doc.dump();
  try {
    wt::wan::load_clip_vision(root);
    ADD_FAILURE() << "a quick_gelu config loaded";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), config + R"(: key "hidden_act": "quick_gelu", not "gelu": Wan's CLIP is )"
                                              "open_clip's ViT-H/14, with the exact GELU");
  }
}

// umT5's tokenizer as transformers keeps it (tokenizer.json in a pipeline's
// tokenizer/, converted by transformers from a SentencePiece model with
// byte fallback and extra ids): wantrain, given the root folder, reads the
// tokenizer.json and gives the ids and mask that transformers' AutoTokenizer
// gives on the text diffusers' prompt_clean makes, as WanPipeline calls it
// (padding to the length, truncation, EOS): on accents, compatibility forms,
// CJK, HTML entities, special tokens' text, characters no piece covers, a
// combining accent and a prompt cut short. SentencePiece on the same
// spiece.model differs where transformers' converter dropped byte fallback.
TEST(DiffusersPeer, Umt5TokenizerJsonGivesTransformersIds) {
  const std::string dir = wt::testing::fresh("diffusers-tokenizer");
  const std::string root = dir + "/pipeline";
  std::filesystem::create_directories(root);
  const std::vector<std::string> words = {"a",     "the",    "cat",    "dog",  "runs",   "over",   "lazy",  "quick",
                                          "brown", "fox",    "video",  "of",   "sunset", "ocean",  "waves", "camera",
                                          "pans",  "Café",   "naïve",  "über", "straße", "日本語", "の",    "テキスト",
                                          "中文",  "한국어", "Привет", "мир",  "\"",     "&",      "fine",  "LOUD"};
  std::mt19937 draw(9);
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int line = 0; line < 600; ++line) {
      for (int w = 0; w < 3 + static_cast<int>(draw() % 8); ++w)
        corpus << (w ? " " : "") << words[draw() % words.size()];
      corpus << "\n";
    }
  }
  std::string long_prompt;
  for (int w = 0; w < 60; ++w) long_prompt += (w ? " " : "") + words[draw() % 20];
  // Plain words; accents; CJK and Cyrillic; a ligature, full-width letters, an
  // ideographic space and a circled digit; HTML entities; curly quotes; two
  // characters no piece covers; special tokens' text; runs of whitespace; an
  // e and a combining acute; a prompt longer than the length.
  const std::vector<std::string> prompts = {"a cat runs over the lazy dog",
                                            "Café naïve über straße façade",
                                            "日本語のテキスト 中文字符 한국어 Привет мир",
                                            "\xef\xac\x81ne \xef\xbc\xac\xef\xbc\xaf\xe3\x80\x80waves \xe2\x91\xa0",
                                            "Tom &amp; Jerry &lt;3 the dog",
                                            "the \xe2\x80\x9c"
                                            "fine\xe2\x80\x9d camera",
                                            "an emoji \xf0\x9f\x99\x82 and \xe2\x9c\xa8 sparkles",
                                            "the end</s> of <extra_id_1> a <pad> video",
                                            "  spaced   out\ttext \n over  ",
                                            "cafe\xcc\x81 naive",
                                            long_prompt};
  std::ofstream(dir + "/prompts.json") << nlohmann::json(prompts).dump();
  constexpr int64_t kLength = 48;
  const auto job =
      run_peer("umt5_tokenizer.py", dir + "/corpus.txt " + dir + " " + root + " " + dir + "/prompts.json " +
                                        std::to_string(kLength) + " 3 " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const wt::wan::T5Tokenizer ours(root);
  EXPECT_EQ(ours.model_path(), root + "/tokenizer/tokenizer.json");
  const auto tokens = ours.encode(prompts, kLength);
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto ids = file.read(*file.find("ids")).to(torch::kLong), mask = file.read(*file.find("mask")).to(torch::kLong);
  ASSERT_EQ(ids.sizes(), tokens.ids.sizes());
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto i = static_cast<int64_t>(p);
    EXPECT_TRUE(torch::equal(tokens.ids[i], ids[i])) << "prompt " << p << " (" << prompts[p] << "):\n  wantrain     "
                                                     << tokens.ids[i] << "\n  transformers " << ids[i];
    EXPECT_TRUE(torch::equal(tokens.mask[i], mask[i])) << "prompt " << p;
  }
  EXPECT_EQ(tokens.truncated, 1);  // the long prompt
  const auto unknown = ours.token_ids(prompts[6]);
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), 2), unknown.end()) << "the emoji is <unk> (id 2)";
  const wt::wan::T5Tokenizer sentencepiece(dir + "/spiece.model");
  EXPECT_NE(sentencepiece.token_ids(prompts[6]), unknown) << "SentencePiece gives the emoji's bytes";
  EXPECT_EQ(sentencepiece.token_ids(prompts[0]), ours.token_ids(prompts[0]));
}
