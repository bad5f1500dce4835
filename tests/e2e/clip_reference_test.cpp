// The CLIP image encoder of Wan's image-to-video models
// (wan/encoders/clip_vision) against tests/reference/clip_reference.py: an
// independent PyTorch evaluation of the visual tower of the official
// wan/modules/clip.py clip_xlm_roberta_vit_h_14, as CLIPModel.visual runs
// it, by the torch wheel's PyTorch on the same weights (random, in the
// official names, with the parts the features do not use present too) and
// the same images.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "../common/build_paths.hpp"
#include "../common/launch.hpp"
#include "../common/tiny_clip.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"

namespace {

using wt::testing::clip_config_json;
using wt::testing::ends_with;
using wt::testing::released_clip_state_dict;

// The same tensors as Hugging Face transformers' CLIPVisionModelWithProjection
// names them (ComfyUI's clip_vision_h.safetensors): the class token [dim],
// the position embedding [tokens, dim], to_qkv split into q_proj, k_proj and
// v_proj, the last layer, post_layernorm and visual_projection (head^T)
// kept; no text tower or log_scale.
wt::io::NamedTensors hugging_face_state_dict(const wt::io::NamedTensors& released) {
  const std::map<std::string, std::string> parts = {{"norm1", "layer_norm1"},
                                                    {"norm2", "layer_norm2"},
                                                    {"attn.proj", "self_attn.out_proj"},
                                                    {"mlp.0", "mlp.fc1"},
                                                    {"mlp.2", "mlp.fc2"}};
  const std::regex block(
      R"(visual\.transformer\.(\d+)\.(norm1|norm2|attn\.to_qkv|attn\.proj|mlp\.0|mlp\.2)\.(weight|bias))");
  wt::io::NamedTensors hf;
  for (const auto& [name, t] : released) {
    std::smatch m;
    if (name == "visual.cls_embedding")
      hf.emplace_back("vision_model.embeddings.class_embedding", t.reshape({t.size(-1)}));
    else if (name == "visual.pos_embedding")
      hf.emplace_back("vision_model.embeddings.position_embedding.weight", t.squeeze(0));
    else if (name == "visual.patch_embedding.weight")
      hf.emplace_back("vision_model.embeddings.patch_embedding.weight", t);
    else if (name.rfind("visual.pre_norm.", 0) == 0)
      hf.emplace_back("vision_model.pre_layrnorm." + name.substr(16), t);
    else if (name.rfind("visual.post_norm.", 0) == 0)
      hf.emplace_back("vision_model.post_layernorm." + name.substr(17), t);
    else if (name == "visual.head")
      hf.emplace_back("visual_projection.weight", t.t().contiguous());
    else if (std::regex_match(name, m, block)) {
      const std::string layer = "vision_model.encoder.layers." + m[1].str() + ".";
      if (m[2] == "attn.to_qkv") {
        const auto qkv = t.chunk(3, 0);
        for (int i = 0; i < 3; ++i)
          hf.emplace_back(layer + "self_attn." + "qkv"[i] + "_proj." + m[3].str(), qkv[i].contiguous());
      } else {
        hf.emplace_back(layer + parts.at(m[2].str()) + "." + m[3].str(), t);
      }
    }
  }
  return hf;
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

// The reference's features for `images` from the weights in `weights_file`.
at::Tensor run_reference(const std::string& dir, const wt::wan::ClipVisionConfig& config,
                         const std::string& weights_file, const at::Tensor& images) {
  std::ofstream(dir + "/config.json") << clip_config_json(config);
  wt::io::write_safetensors(dir + "/inputs.safetensors", {{"images", images}}, torch::kFloat32);
  const auto job = wt::testing::launch(std::string(WANTRAIN_PYTHON) + " " + WANTRAIN_SOURCE_DIR +
                                       "/tests/reference/clip_reference.py " + dir + "/config.json " + weights_file +
                                       " " + dir + "/inputs.safetensors " + dir + "/out.safetensors");
  EXPECT_EQ(job.status, 0) << job.output;
  if (job.status != 0) return {};
  const auto file = wt::io::SafetensorsFile::open(dir + "/out.safetensors");
  return file.read(*file.find("features"));
}

// Both in fp32 on the same inputs, the sums in another order (the bicubic
// resize is the same ATen kernel; matmuls against F.linear, softmax of
// scores scaled after the product): a few ulps (1e-7) per op through a few
// pre-norm blocks, measured 4e-7 of the output scale. 1e-4 is far above
// that and below semantic slips, measured with the reference on the second
// case's weights: QuickGELU for GELU 7e-3, a resize with align_corners 8e-2,
// 2 heads for 4 0.3, the last block run too 0.5 (even the tanh GELU gives
// 1.3e-4).
constexpr double kTolerance = 1e-4;

void expect_matches_reference(const char* name, const wt::wan::ClipVisionConfig& config,
                              const std::map<std::string, std::string>& metadata, const at::Tensor& images) {
  SCOPED_TRACE(name);
  const std::string dir = wt::testing::fresh(std::string("clip-reference-") + name);
  std::filesystem::create_directories(dir);
  const std::string weights = dir + "/clip.safetensors";
  wt::io::write_safetensors(weights, released_clip_state_dict(config, 21), torch::kFloat32, metadata);
  const auto reference = run_reference(dir, config, weights, images);
  ASSERT_TRUE(reference.defined());

  const auto tower = wt::wan::load_clip_vision(weights, torch::kFloat32, torch::kCPU);
  const auto& got = tower->config();
  EXPECT_EQ(got.image_size, config.image_size);
  EXPECT_EQ(got.patch_size, config.patch_size);
  EXPECT_EQ(got.dim, config.dim);
  EXPECT_EQ(got.mlp_ratio, config.mlp_ratio);
  EXPECT_EQ(got.num_heads, config.num_heads);
  EXPECT_EQ(got.num_layers, config.num_layers);
  const auto ours = tower->features(images);
  EXPECT_EQ(ours.scalar_type(), torch::kFloat);
  ASSERT_EQ(ours.sizes(), reference.sizes());
  EXPECT_EQ(ours.size(1), config.tokens());
  const double scale = max_abs(reference), error = max_abs(ours - reference);
  EXPECT_GT(scale, 0.5);
  EXPECT_LE(error, kTolerance * scale) << "max |ours - reference| = " << error << " of max |reference| = " << scale;
  std::cout << "[ measured ] " << name << ": max |ours - reference| = " << error << " = " << error / scale
            << " of max |reference| " << scale << "\n";
}

const wt::wan::ClipVisionConfig kTinyClip{/*image_size=*/28, /*patch_size=*/14, /*dim=*/160,
                                          /*mlp_ratio=*/4,   /*num_heads=*/2,   /*num_layers=*/3};

}  // namespace

// heads = dim / 80 as ViT-H's; two square images at the tower's own size
// (the resize an identity) and a batch of two.
TEST(ClipReference, TinyTowerMatchesTheReference) {
  torch::manual_seed(31);
  expect_matches_reference("tiny", kTinyClip, {{"format", "pt"}}, torch::rand({2, 3, 28, 28}) * 2 - 1);
}

// Non-square images of another size (the bicubic resize shrinks one side
// and stretches the other), a 3x3 patch grid, mlp_ratio 2, four layers,
// and heads from the file's metadata (4 of 40 channels, not the default
// dim / 80 = 2).
TEST(ClipReference, ResizedNonSquareImagesAndHeadsFromMetadataMatchTheReference) {
  torch::manual_seed(32);
  const wt::wan::ClipVisionConfig config{/*image_size=*/42, /*patch_size=*/14, /*dim=*/160,
                                         /*mlp_ratio=*/2,   /*num_heads=*/4,   /*num_layers=*/4};
  expect_matches_reference("resized", config, {{"format", "pt"}, {"clip_num_heads", "4"}},
                           torch::rand({3, 3, 37, 50}) * 2 - 1);
}

// The released layout: torch.save of the whole state dict (the .pth that
// Wan publishes), read by the restricted .pth reader, gives the features
// the safetensors file gives; bf16 weights compute in bf16 and follow.
TEST(ClipReference, ATorchSavedStateDictLoadsToTheSameFeatures) {
  const std::string dir = wt::testing::fresh("clip-files");
  std::filesystem::create_directories(dir);
  wt::io::write_safetensors(dir + "/clip.safetensors", released_clip_state_dict(kTinyClip, 22), torch::kFloat32);
  const std::string pth = dir + "/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth";
  const auto job = wt::testing::launch(
      std::string(WANTRAIN_PYTHON) + " -c \"import sys, torch; sys.path.insert(0, '" + WANTRAIN_SOURCE_DIR +
      "/tests/reference'); import wan_reference as r; torch.save(r.read_safetensors('" + dir +
      "/clip.safetensors'), '" + pth + "')\"");
  ASSERT_EQ(job.status, 0) << job.output;

  torch::manual_seed(33);
  const auto images = torch::rand({2, 3, 30, 20}) * 2 - 1;
  const auto want =
      wt::wan::load_clip_vision(dir + "/clip.safetensors", torch::kFloat32, torch::kCPU)->features(images);
  const auto from_pth = wt::wan::load_clip_vision(pth, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(from_pth->config().num_layers, 3);
  EXPECT_EQ(from_pth->config().num_heads, 2);
  // Only the blocks the features need: 2 of 3, 6 tensors each and 5 more.
  EXPECT_EQ(from_pth->named_parameters().size(), 2u * 12 + 5);
  EXPECT_TRUE(torch::equal(from_pth->features(images), want));

  const auto bf16 = wt::wan::load_clip_vision(pth, torch::kBFloat16, torch::kCPU);
  for (const auto& p : bf16->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  const auto got = bf16->features(images);
  EXPECT_EQ(got.scalar_type(), torch::kFloat);
  const double relative = ((got - want).norm() / want.norm()).item<double>();
  // bf16 keeps 8 bits (0.4% a rounding) through 2 blocks, each renormalised.
  EXPECT_LT(relative, 0.05);
  std::cout << "[ measured ] bf16 against fp32: " << relative << " (relative L2)\n";
}

// ComfyUI's clip_vision_h.safetensors keeps the tower under Hugging Face's
// CLIPVisionModel names: the same random weights written so (q, k and v
// apart, the class token and position embedding without their leading 1s,
// a last layer, post_layernorm and visual_projection that stay unread) load
// to the same parameters and bitwise the same features as the official
// names; a missing or misshaped q/k/v tensor is one line in the file's names.
TEST(ClipReference, HuggingFaceNamesLoadToTheSameFeatures) {
  const std::string dir = wt::testing::fresh("clip-hugging-face");
  std::filesystem::create_directories(dir);
  const auto released = released_clip_state_dict(kTinyClip, 24);
  const auto hf = hugging_face_state_dict(released);
  const std::string official = dir + "/clip.safetensors", comfy = dir + "/clip_vision_h.safetensors";
  wt::io::write_safetensors(official, released, torch::kFloat32);
  wt::io::write_safetensors(comfy, hf, torch::kFloat32);
  // All of the tower's tensors, q/k/v three for one, and the last layer's.
  EXPECT_EQ(hf.size(), 5u + 3 * 16 + 3);
  EXPECT_TRUE(std::any_of(hf.begin(), hf.end(), [](const auto& item) {
    return item.first == "vision_model.encoder.layers.2.self_attn.v_proj.bias";
  }));

  const auto want = wt::wan::load_clip_vision(official, torch::kFloat32, torch::kCPU);
  const auto got = wt::wan::load_clip_vision(comfy, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(want->weights_layout(), "official names");
  EXPECT_EQ(got->weights_layout(), "Hugging Face names");
  EXPECT_EQ(got->config().image_size, kTinyClip.image_size);
  EXPECT_EQ(got->config().patch_size, kTinyClip.patch_size);
  EXPECT_EQ(got->config().dim, kTinyClip.dim);
  EXPECT_EQ(got->config().mlp_ratio, kTinyClip.mlp_ratio);
  EXPECT_EQ(got->config().num_heads, kTinyClip.num_heads);
  EXPECT_EQ(got->config().num_layers, kTinyClip.num_layers);
  const auto want_params = want->named_parameters(), got_params = got->named_parameters();
  ASSERT_EQ(got_params.size(), want_params.size());
  for (const auto& item : want_params) EXPECT_TRUE(torch::equal(got_params[item.key()], item.value())) << item.key();
  torch::manual_seed(34);
  const auto images = torch::rand({2, 3, 30, 20}) * 2 - 1;
  EXPECT_TRUE(torch::equal(got->features(images), want->features(images)));

  const auto write = [&](const std::string& file,
                         const std::function<bool(std::pair<std::string, at::Tensor>&)>& keep) {
    wt::io::NamedTensors tensors;
    for (auto item : hf)
      if (keep(item)) tensors.push_back(item);
    wt::io::write_safetensors(dir + "/" + file, tensors, torch::kFloat32);
    return dir + "/" + file;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("missing.safetensors",
             [](auto& item) { return item.first != "vision_model.encoder.layers.1.self_attn.k_proj.bias"; }),
       "no tensor vision_model.encoder.layers.1.self_attn.k_proj.bias"},
      {write("misshaped.safetensors",
             [](auto& item) {
               if (item.first == "vision_model.encoder.layers.0.self_attn.v_proj.weight")
                 item.second = item.second.narrow(0, 0, 80);
               return true;
             }),
       "vision_model.encoder.layers.0.self_attn.v_proj.weight is [80, 160], expected [160, 160]"},
      {write("no_pos.safetensors",
             [](auto& item) { return item.first != "vision_model.embeddings.position_embedding.weight"; }),
       "no tensor vision_model.embeddings.position_embedding.weight"},
  };
  for (const auto& [file, why] : cases) {
    try {
      wt::wan::load_clip_vision(file, torch::kFloat32, torch::kCPU);
      ADD_FAILURE() << file;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "CLIP weights " + file + " (Hugging Face names): " + why);
    }
  }
}

// One line naming the file, the layout read (and the tensor) for files that
// do not hold the tower; images of another shape are one line too.
TEST(ClipReference, FilesWithoutTheTowerAreRefusedInOneLine) {
  const std::string dir = wt::testing::fresh("clip-bad-files");
  std::filesystem::create_directories(dir);
  const auto full = released_clip_state_dict(kTinyClip, 23);
  const auto write = [&](const std::string& file, const std::function<bool(std::pair<std::string, at::Tensor>&)>& keep,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) {
    wt::io::NamedTensors tensors;
    for (auto item : full)
      if (keep(item)) tensors.push_back(item);
    wt::io::write_safetensors(dir + "/" + file, tensors, torch::kFloat32, metadata);
    return dir + "/" + file;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("text_only.safetensors", [](auto& item) { return item.first.rfind("visual.", 0) != 0; }),
       ": neither visual.* (official) nor vision_model.* or embeddings.* (Hugging Face) tensors (not a CLIP image "
       "encoder)"},
      {write("missing.safetensors", [](auto& item) { return item.first != "visual.transformer.1.norm2.bias"; }),
       " (official names): no tensor visual.transformer.1.norm2.bias"},
      {write("misshaped.safetensors",
             [](auto& item) {
               if (item.first == "visual.transformer.0.mlp.2.weight") item.second = item.second.narrow(1, 0, 320);
               return true;
             }),
       " (official names): visual.transformer.0.mlp.2.weight is [160, 320], expected [160, 640]"},
      {write("no_pos.safetensors", [](auto& item) { return item.first != "visual.pos_embedding"; }),
       " (official names): no tensor visual.pos_embedding"},
      {write("bad_heads.safetensors", [](auto&) { return true; }, {{"clip_num_heads", "3"}}),
       " (official names): metadata clip_num_heads \"3\" is not a divisor of dim 160"},
  };
  for (const auto& [file, why] : cases) {
    try {
      wt::wan::load_clip_vision(file, torch::kFloat32, torch::kCPU);
      ADD_FAILURE() << file;
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "CLIP weights " + file + why);
    }
  }

  const auto tower = wt::wan::load_clip_vision(write("good.safetensors", [](auto&) { return true; }));
  try {
    tower->features(torch::zeros({2, 4, 28, 28}));
    ADD_FAILURE() << "4 channels";
  } catch (const wt::UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "CLIP features: images [2, 4, 28, 28] of Float must be [N, 3, H, W] floating point in [-1, 1]");
  }
}

// The default is clip_xlm_roberta_vit_h_14's image tower; a tower's
// parameters are the reference's names (with "visual." stripped) and
// shapes, but for the last block.
TEST(ClipReference, TheDefaultIsVitH14AndTheNamesAreTheOfficialOnes) {
  const wt::wan::ClipVisionConfig vit_h;
  EXPECT_EQ(vit_h.image_size, 224);
  EXPECT_EQ(vit_h.patch_size, 14);
  EXPECT_EQ(vit_h.dim, 1280);
  EXPECT_EQ(vit_h.num_heads, 16);
  EXPECT_EQ(vit_h.num_layers, 32);
  EXPECT_EQ(vit_h.tokens(), 257);
  const std::string dir = wt::testing::fresh("clip-names");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << clip_config_json(kTinyClip);
  const auto job = wt::testing::launch(std::string(WANTRAIN_PYTHON) + " -c \"import sys, json; sys.path.insert(0, '" +
                                       WANTRAIN_SOURCE_DIR +
                                       "/tests/reference'); import clip_reference as r; "
                                       "print(json.dumps(r.parameter_shapes(r.load_config('" +
                                       dir + "/config.json'))))\"");
  ASSERT_EQ(job.status, 0) << job.output;
  const auto official = nlohmann::json::parse(job.output);
  wt::wan::ClipVision tower(kTinyClip);
  const auto params = tower->named_parameters();
  EXPECT_EQ(params.size(), official.size());
  for (const auto& item : params) {
    EXPECT_FALSE(item.value().requires_grad()) << item.key();
    ASSERT_TRUE(official.contains("visual." + item.key())) << item.key();
    EXPECT_EQ(item.value().sizes().vec(), official["visual." + item.key()].get<std::vector<int64_t>>()) << item.key();
  }
}
