// The umT5 encoder (wan/encoders/t5_encoder) against
// tests/reference/t5_reference.py: an independent PyTorch evaluation of the
// official wan/modules/t5.py encoder, run by the torch wheel's PyTorch on the
// same weights (random, in the official names) and the same token ids.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

void expect_matches_reference(const char* name, const char* config_json) {
  SCOPED_TRACE(name);
  const std::string dir = wt::testing::fresh(std::string("t5-reference-") + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  const auto config = wt::wan::load_t5_config(dir + "/config.json");
  torch::manual_seed(5);
  wt::wan::T5Encoder encoder(config);
  torch::NoGradGuard no_grad;
  for (auto& p : encoder->parameters()) p.copy_(torch::randn_like(p) * 0.3);  // every weight matters
  wt::io::NamedTensors weights;
  for (const auto& item : encoder->named_parameters()) weights.emplace_back(item.key(), item.value());
  wt::io::write_safetensors(dir + "/weights.safetensors", weights, torch::kFloat32);

  // Two prompts: one long enough for the logarithmic buckets and past the
  // maximum distance (128), one short and padded (its padding masked).
  const int64_t length = 140;
  auto ids = torch::randint(1, config.vocab, {2, length}, torch::kLong);
  auto mask = torch::ones({2, length}, torch::kLong);
  mask[1].slice(0, 9).zero_();
  ids[1].slice(0, 9).zero_();
  wt::io::write_safetensors(dir + "/inputs.safetensors",
                            {{"ids", ids.to(torch::kFloat)}, {"mask", mask.to(torch::kFloat)}}, torch::kFloat32);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR + "/tests/reference/t5_reference.py " + dir +
      "/config.json " + dir + "/weights.safetensors " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  const auto reference = file.read(*file.find("out"));
  const auto ours = encoder->forward(ids, mask);
  ASSERT_EQ(ours.sizes(), reference.sizes());
  const double scale = reference.abs().max().item<double>();
  const double error = (ours - reference).abs().max().item<double>();
  EXPECT_GT(scale, 0.1);
  // Both in fp32, the sums in another order (einsum against matmul, a fused
  // GELU): a few ulps (1e-7) per op, grown through 2-3 layers; 1e-4 is far
  // above that and far below any semantic slip (a scaled attention gives 0.5).
  EXPECT_LT(error, 1e-4 * scale) << "max |ours - reference| = " << error << " of max |reference| = " << scale;
  // The padded prompt's real tokens do not see its padding: the same
  // tokens alone give the same embedding.
  const auto alone = encoder->forward(ids[1].slice(0, 0, 9).unsqueeze(0), mask[1].slice(0, 0, 9).unsqueeze(0));
  EXPECT_LT((alone[0] - ours[1].slice(0, 0, 9)).abs().max().item<double>(), 1e-4 * scale);
}

}  // namespace

TEST(T5Reference, PerLayerPositionBiasAsUmT5MatchesTheReference) {
  expect_matches_reference("umt5", R"({"vocab": 300, "dim": 32, "dim_attn": 48, "dim_ffn": 40, "num_heads": 4,
                                       "num_layers": 2, "num_buckets": 32, "shared_pos": false})");
}

TEST(T5Reference, ASharedPositionBiasMatchesTheReference) {
  expect_matches_reference("shared", R"({"vocab": 50, "dim": 24, "dim_attn": 24, "dim_ffn": 64, "num_heads": 3,
                                         "num_layers": 3, "num_buckets": 16, "shared_pos": true})");
}

// The released weights are bf16 and stay so: every parameter is made in
// bf16, and the embedding follows the fp32 model's to bf16's precision.
TEST(T5Reference, Bf16WeightsStayBf16AndFollowTheFp32Model) {
  const auto config = wt::wan::parse_t5_config(
      R"({"vocab": 300, "dim": 32, "dim_attn": 32, "dim_ffn": 40, "num_heads": 4, "num_layers": 2})", "test");
  torch::manual_seed(5);
  wt::wan::T5Encoder fp32(config), bf16(config, torch::kBFloat16);
  torch::NoGradGuard no_grad;
  for (auto& p : fp32->parameters()) p.copy_(torch::randn_like(p) * 0.3);
  auto fp32_params = fp32->named_parameters();
  for (auto& item : bf16->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
    item.value().copy_(fp32_params[item.key()]);
    fp32_params[item.key()].copy_(item.value());  // both hold the bf16 values
  }
  const auto ids = torch::randint(1, config.vocab, {2, 24}, torch::kLong);
  const auto mask = torch::ones({2, 24}, torch::kLong);
  const auto want = fp32->forward(ids, mask);
  const auto got = bf16->forward(ids, mask);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  const double relative = ((got.to(torch::kFloat) - want).norm() / want.norm()).item<double>();
  // bf16 keeps 8 bits (0.4% a rounding), a few dozen roundings deep: 0.008 measured (AMD EPYC).
  EXPECT_LT(relative, 3e-2);
}

// The released layout: torch.save of the encoder's state dict in bf16
// (models_t5_umt5-xxl-enc-bf16.pth), official names; loaded into a bf16
// encoder by name, it encodes as the encoder that wrote it.
TEST(T5Reference, ATorchSavedBf16StateDictLoadsByName) {
  const std::string dir = wt::testing::fresh("t5-pth");
  std::filesystem::create_directories(dir);
  const auto config = wt::wan::parse_t5_config(
      R"({"vocab": 300, "dim": 32, "dim_attn": 32, "dim_ffn": 40, "num_heads": 4, "num_layers": 2})", "test");
  torch::manual_seed(6);
  wt::wan::T5Encoder saved(config, torch::kBFloat16);
  wt::io::NamedTensors weights;
  for (const auto& item : saved->named_parameters()) weights.emplace_back(item.key(), item.value());
  wt::io::write_safetensors(dir + "/t5.safetensors", weights, torch::kBFloat16);
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " -c \"import sys, torch; sys.path.insert(0, '" + WANTRAIN_SOURCE_DIR +
      "/tests/reference'); import wan_reference as r; torch.save({k: v.to(torch.bfloat16) for k, v in "
      "r.read_safetensors('" +
      dir + "/t5.safetensors').items()}, '" + dir + "/t5-enc-bf16.pth')\"");
  ASSERT_EQ(job.status, 0) << job.output;

  torch::manual_seed(99);
  wt::wan::T5Encoder loaded(config, torch::kBFloat16);
  const auto report = wt::wan::load_weights(*loaded, dir + "/t5-enc-bf16.pth");
  EXPECT_TRUE(report.complete()) << report.summary();
  const auto ids = torch::randint(1, config.vocab, {1, 16}, torch::kLong);
  const auto mask = torch::ones({1, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(loaded->forward(ids, mask), saved->forward(ids, mask)));
}

// Hugging Face's UMT5EncoderModel layout (the diffusers-format Wan
// repositories' text_encoder/): its names, the embedding stored twice
// (shared and encoder.embed_tokens, tied), loaded by open_t5_weights.
TEST(T5Reference, HuggingFaceUmt5NamesLoadAsTheOfficialOnes) {
  const std::string dir = wt::testing::fresh("t5-hf");
  std::filesystem::create_directories(dir);
  const auto config = wt::wan::parse_t5_config(
      R"({"vocab": 300, "dim": 32, "dim_attn": 32, "dim_ffn": 40, "num_heads": 4, "num_layers": 2})", "test");
  torch::manual_seed(8);
  wt::wan::T5Encoder saved(config);
  wt::io::NamedTensors hugging_face;
  for (const auto& item : saved->named_parameters()) {
    std::string name = item.key();
    const std::map<std::string, std::string> parts = {
        {"attn.q", "layer.0.SelfAttention.q"},
        {"attn.k", "layer.0.SelfAttention.k"},
        {"attn.v", "layer.0.SelfAttention.v"},
        {"attn.o", "layer.0.SelfAttention.o"},
        {"norm1", "layer.0.layer_norm"},
        {"norm2", "layer.1.layer_norm"},
        {"ffn.gate.0", "layer.1.DenseReluDense.wi_0"},
        {"ffn.fc1", "layer.1.DenseReluDense.wi_1"},
        {"ffn.fc2", "layer.1.DenseReluDense.wo"},
        {"pos_embedding.embedding", "layer.0.SelfAttention.relative_attention_bias"}};
    if (name == "token_embedding.weight") {
      hugging_face.emplace_back("shared.weight", item.value());
      name = "encoder.embed_tokens.weight";
    } else if (name == "norm.weight") {
      name = "encoder.final_layer_norm.weight";
    } else {
      const auto dot = name.find('.', 7);  // "blocks.N."
      const std::string n = name.substr(7, dot - 7), part = name.substr(dot + 1, name.size() - dot - 1 - 7);
      ASSERT_TRUE(parts.count(part)) << name;
      name = "encoder.block." + n + "." + parts.at(part) + ".weight";
    }
    hugging_face.emplace_back(name, item.value());
  }
  wt::io::write_safetensors(dir + "/model.safetensors", hugging_face, torch::kFloat32);

  torch::manual_seed(99);
  wt::wan::T5Encoder loaded(config);
  const auto report = wt::wan::load_weights(*loaded, wt::wan::open_t5_weights(dir + "/model.safetensors"));
  EXPECT_TRUE(report.complete()) << report.summary();
  const auto ids = torch::randint(1, config.vocab, {1, 12}, torch::kLong);
  const auto mask = torch::ones({1, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(loaded->forward(ids, mask), saved->forward(ids, mask)));
}

TEST(T5Config, TheDefaultIsUmT5XxlAndBadFilesAreOneLine) {
  const wt::wan::T5Config xxl;
  EXPECT_EQ(xxl.vocab, 256384);
  EXPECT_EQ(xxl.dim, 4096);
  EXPECT_EQ(xxl.dim_ffn, 10240);
  EXPECT_EQ(xxl.num_heads, 64);
  EXPECT_EQ(xxl.num_layers, 24);
  EXPECT_FALSE(xxl.shared_pos);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[1]", "t5.json: not a JSON object of T5 settings"},
      {R"({"dim": -4})", "t5.json: \"dim\" must be a positive integer"},
      {R"({"heads": 4})", "t5.json: unknown key \"heads\""},
      {R"({"dim_attn": 10, "num_heads": 4})", "t5.json: dim_attn 10 is not a multiple of num_heads 4"},
      {R"({"shared_pos": 1})", "t5.json: \"shared_pos\" must be true or false"},
  };
  for (const auto& [text, expected] : bad) {
    try {
      wt::wan::parse_t5_config(text, "t5.json");
      ADD_FAILURE() << text;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
}
