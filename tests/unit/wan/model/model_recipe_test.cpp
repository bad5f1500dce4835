// build_model, the one way a WanModel is made from its recipe: a seed gives
// the model Wan's initialisation draws from it; weights (a file or a
// checkpoint's model or EMA) replace every parameter; LoRA files merge as
// merge_lora_file does; adapters come last over a base whose checksum is
// the base's; a recipe built twice is the same model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "../../../common/small_models.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/wan/model/model_recipe.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace {

using wt::wan::BuiltModel;
using wt::wan::FirstWeights;
using wt::wan::ModelRecipe;
using wt::wan::ModelWeights;
using wt::wan::WanModel;

std::string temp(const std::string& name) { return ::testing::TempDir() + "recipe-" + name; }

wt::io::NamedTensors parameters_of(const WanModel& model) {
  wt::io::NamedTensors out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

// Every parameter equal, bit for bit, by name.
void expect_same_model(const WanModel& a, const WanModel& b) {
  const auto x = parameters_of(a), y = parameters_of(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].first, y[i].first);
    EXPECT_TRUE(torch::equal(x[i].second, y[i].second)) << x[i].first;
  }
}

// A model whose every parameter differs from the seed's draw (Wan zeroes
// the head; here everything is drawn from `seed` anew).
WanModel distinct_model(const wt::wan::WanConfig& config, uint64_t seed) {
  auto model = WanModel(config);
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_(0, 0.05);
  return model;
}

}  // namespace

TEST(ModelRecipe, ASeedGivesWansInitialisationFromThatSeedAndOneRecipeIsOneModel) {
  const auto config = wt::testing::small_wan_config();
  torch::manual_seed(11);
  const WanModel drawn(config);  // what the seed's recipe must be, by construction
  ModelRecipe recipe{config};
  recipe.seed = 11;
  const auto once = wt::wan::build_model(recipe), twice = wt::wan::build_model(recipe);
  expect_same_model(once.model, drawn);
  expect_same_model(once.model, twice.model);
  EXPECT_TRUE(once.loaded.empty());
  recipe.seed = 12;  // another seed, another draw (the patch embedding's weight is drawn)
  EXPECT_FALSE(torch::equal(parameters_of(wt::wan::build_model(recipe).model).front().second,
                            parameters_of(drawn).front().second));
}

TEST(ModelRecipe, WeightsReplaceEveryParameterFromAFileOrACheckpointsModelOrEma) {
  const auto config = wt::testing::small_wan_config();
  const auto saved = distinct_model(config, 3), ema = distinct_model(config, 4);
  const auto file = temp("weights.safetensors");
  wt::wan::save_weights(*saved, file);
  for (const auto first : {FirstWeights::Seed, FirstWeights::None}) {
    ModelRecipe recipe{config, at::kFloat, first};
    recipe.weights = ModelWeights{file};
    const auto built = wt::wan::build_model(recipe);
    expect_same_model(built.model, saved);
    EXPECT_NE(built.loaded.find("loaded"), std::string::npos) << built.loaded;
  }
  wt::ckpt::Checkpoint checkpoint;
  checkpoint.model = parameters_of(saved);
  checkpoint.ema = parameters_of(ema);
  checkpoint.model_config = wt::wan::to_json(config);
  const auto path = temp("checkpoint.h5");
  wt::ckpt::write_checkpoint(path, checkpoint);
  ModelRecipe recipe{config};
  recipe.weights = ModelWeights{path, /*prefer_ema=*/false};
  expect_same_model(wt::wan::build_model(recipe).model, saved);
  recipe.weights->prefer_ema = true;
  expect_same_model(wt::wan::build_model(recipe).model, ema);
  // An open source is read instead of the path.
  const auto source = wt::wan::open_weights(file);
  recipe.weights = ModelWeights{"not read"};
  expect_same_model(wt::wan::build_model(recipe, {&source, {}}).model, saved);
}

TEST(ModelRecipe, WeightsThatDoNotFitAreTheLoadersError) {
  auto config = wt::testing::small_wan_config();
  const auto file = temp("two-layers.safetensors");
  wt::wan::save_weights(*distinct_model(config, 5), file);
  ModelRecipe recipe{wt::testing::small_wan_config(3)};
  recipe.weights = ModelWeights{file};
  EXPECT_THROW(wt::wan::build_model(recipe), wt::UsageError);
  recipe.weights = ModelWeights{temp("absent.safetensors")};
  EXPECT_THROW(wt::wan::build_model(recipe), wt::UsageError);
}

TEST(ModelRecipe, LoraFilesMergeInOrderAsMergeLoraFileDoes) {
  const auto config = wt::testing::small_wan_config();
  const wt::wan::LoraOptions lora{4, 8, 0, {"self_attn.q", "ffn.0"}};
  auto adapted = wt::testing::seeded_small_model(config, lora);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : adapted->named_parameters())
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.05);
  }
  wt::io::NamedTensors adapters;
  for (const auto& item : adapted->named_parameters())
    if (item.key().find(".lora_") != std::string::npos) adapters.emplace_back(item.key(), item.value().detach());
  const auto lora_file = temp("adapters.safetensors");
  wt::wan::write_lora_file(lora_file, adapters, lora, "crc32:00000000");

  ModelRecipe recipe{config};
  recipe.seed = 9;
  recipe.merged_loras = {{lora_file, 0.5}, {lora_file, 2.0}};
  const auto built = wt::wan::build_model(recipe);
  ASSERT_EQ(built.merged_layers.size(), 2u);
  EXPECT_EQ(built.merged_layers[0], 2 * int(config.num_layers));  // two targets in each block
  torch::manual_seed(9);
  WanModel expected(config);
  wt::wan::merge_lora_file(*expected, lora_file, 0.5);
  wt::wan::merge_lora_file(*expected, lora_file, 2.0);
  expect_same_model(built.model, expected);
}

TEST(ModelRecipe, AdaptersComeLastOverTheBaseTheChecksumNames) {
  const auto config = wt::testing::small_wan_config();
  ModelRecipe base{config, at::kBFloat16};
  base.seed = 5;
  const auto plain = wt::wan::build_model(base);
  auto recipe = base;
  recipe.adapters = wt::wan::LoraOptions{4, 4, 0, {}};
  const auto built = wt::wan::build_model(recipe);
  EXPECT_EQ(built.base_checksum, wt::wan::held_weights_checksum(config, *plain.model));
  EXPECT_TRUE(plain.base_checksum.empty());
  EXPECT_GT(built.adapter_parameters, 0);
  int64_t trainable = 0;
  for (const auto& item : built.model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    EXPECT_NE(item.key().find(".lora_"), std::string::npos) << item.key();
    trainable += item.value().numel();
  }
  EXPECT_EQ(trainable, built.adapter_parameters);
}

// A VACE model from a text-to-video model's weights (the VACE paper's
// start): every base parameter is the file's, the branch keeps the seed's
// draw with its projections zero, so the model is the base whatever the
// context. Anything else missing from the file is still the strict error.
// A VACE model over `t2v`'s base: hints after blocks 0 and 2, a 6-channel context.
wt::wan::WanConfig vace_over(wt::wan::WanConfig t2v) {
  t2v.model_type = wt::wan::ModelType::VACE;
  t2v.vace_layers = {0, 2};
  t2v.vace_in_dim = 6;
  return t2v;
}

TEST(ModelRecipe, AVaceModelStartsFromATextToVideoModelsWeightsWithAFreshBranch) {
  const auto t2v_config = wt::testing::small_wan_config(3);
  auto base = distinct_model(t2v_config, 31);
  const std::string file = temp("t2v-base.safetensors");
  wt::wan::save_weights(*base, file);
  const auto config = vace_over(t2v_config);
  ModelRecipe recipe;
  recipe.config = config;
  recipe.seed = 5;
  recipe.weights = ModelWeights{file};
  BuiltModel built = wt::wan::build_model(recipe);
  EXPECT_NE(built.loaded.find("tensors of a text-to-video model loaded; the VACE branch's"), std::string::npos)
      << built.loaded;
  const auto vace = built.model->named_parameters();
  for (const auto& item : base->named_parameters())
    EXPECT_TRUE(torch::equal(vace[item.key()], item.value())) << item.key();
  EXPECT_EQ(vace["vace_blocks.1.after_proj.weight"].abs().max().item<float>(), 0.0f);
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const auto x = torch::randn({1, 4, 2, 4, 4}), t = torch::tensor({500.0f}), ctx = torch::randn({1, 3, 16});
  wt::wan::ModelCondition control;
  control.vace_context = torch::randn({1, 6, 2, 4, 4});
  EXPECT_TRUE(torch::allclose(built.model->forward(x, t, ctx, control), base->forward(x, t, ctx), 1e-5, 1e-6));

  // A VACE model's file without one base tensor: not a t2v base, refused.
  auto partial = parameters_of(distinct_model(config, 32));
  partial.erase(partial.begin());  // patch_embedding.weight
  wt::io::write_safetensors(temp("partial.safetensors"), partial, torch::kFloat32);
  recipe.weights = ModelWeights{temp("partial.safetensors")};
  EXPECT_THROW(wt::wan::build_model(recipe), wt::UsageError);
}

// --trainable vace without LoRA: the branch alone is trainable, and the
// frozen base's checksum is the same whether the base came from a
// text-to-video file or from a VACE model's file with another branch;
// another base tensor changes it.
TEST(ModelRecipe, TheVaceBranchAloneTrainsOverABaseItsChecksumNames) {
  const auto t2v_config = wt::testing::small_wan_config(3);
  const std::string t2v_file = temp("branch-t2v.safetensors");
  wt::wan::save_weights(*distinct_model(t2v_config, 41), t2v_file);
  const auto config = vace_over(t2v_config);
  ModelRecipe recipe;
  recipe.config = config;
  recipe.seed = 5;
  recipe.weights = ModelWeights{t2v_file};
  recipe.vace_branch_only = true;
  const BuiltModel from_t2v = wt::wan::build_model(recipe);
  int64_t trainable = 0, branch = 0;
  for (const auto& item : from_t2v.model->named_parameters()) {
    EXPECT_EQ(item.value().requires_grad(), wt::wan::in_vace_branch(item.key())) << item.key();
    if (item.value().requires_grad()) trainable += item.value().numel();
  }
  for (const auto& [name, shape] : wt::wan::parameter_shapes(config))
    if (name.rfind("vace_", 0) == 0) branch += wt::wan::element_count(shape);
  EXPECT_EQ(trainable, branch);
  EXPECT_EQ(wt::wan::vace_branch_parameter_count(config), branch);

  // The same base under another branch, read from a VACE model's file.
  auto vace = distinct_model(config, 42);
  {
    torch::NoGradGuard no_grad;
    const auto base = from_t2v.model->named_parameters();
    for (auto& item : vace->named_parameters())
      if (!wt::wan::in_vace_branch(item.key())) item.value().copy_(base[item.key()]);
  }
  wt::wan::save_weights(*vace, temp("branch-vace.safetensors"));
  recipe.weights = ModelWeights{temp("branch-vace.safetensors")};
  const BuiltModel from_vace = wt::wan::build_model(recipe);
  EXPECT_EQ(from_vace.base_checksum, from_t2v.base_checksum);
  EXPECT_EQ(from_vace.base_checksum.rfind("crc32:", 0), 0u);
  EXPECT_NE(wt::wan::held_weights_checksum(config, *from_vace.model),
            wt::wan::held_weights_checksum(config, *from_t2v.model));  // the branches differ
  {
    torch::NoGradGuard no_grad;
    vace->named_parameters()["blocks.1.ffn.0.bias"].add_(1e-3);
  }
  wt::wan::save_weights(*vace, temp("branch-other.safetensors"));
  recipe.weights = ModelWeights{temp("branch-other.safetensors")};
  EXPECT_NE(wt::wan::build_model(recipe).base_checksum, from_t2v.base_checksum);
}
