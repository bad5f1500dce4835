// Model configs: the shipped files, their parameter counts from shapes alone,
// the model's parameters against those shapes, and each bad config's error.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../../common/build_paths.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/util/error.hpp"

namespace {

using wt::wan::WanConfig;

std::string config_path(const std::string& name) {
  return std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/" + name + ".json";
}

// The parameter count written out layer by layer from Wan's architecture.
int64_t count_by_formula(const WanConfig& c) {
  const int64_t d = c.dim, f = c.ffn_dim, pv = c.patch_volume();
  const int64_t linear_dd = d * d + d;
  int64_t total = d * c.in_dim * pv + d;    // patch_embedding
  total += c.text_dim * d + d + linear_dd;  // text_embedding.0, .2
  total += c.freq_dim * d + d + linear_dd;  // time_embedding.0, .2
  total += d * 6 * d + 6 * d;               // time_projection.1
  const int64_t attention = 4 * linear_dd + (c.qk_norm ? 2 * d : 0);
  const int64_t block = 6 * d + 2 * attention + (c.cross_attn_norm ? 2 * d : 0) + (d * f + f) + (f * d + d);
  total += c.num_layers * block;
  total += 2 * d + d * c.out_dim * pv + c.out_dim * pv;  // head.modulation, head.head
  if (c.image_branch()) {
    const int64_t w = c.image_dim;
    total += c.num_layers * (2 * linear_dd + (c.qk_norm ? d : 0));                   // k_img, v_img, norm_k_img
    total += 2 * w + (w * w + w) + (w * d + d) + 2 * d;                              // img_emb.proj.0, .1, .3, .4
    if (c.model_type == wt::wan::ModelType::FLF2V) total += 2 * c.image_tokens * w;  // emb_pos
  }
  if (c.ref_conv) total += d * c.out_dim * c.patch_size[1] * c.patch_size[2] + d;  // Fun-Control V1.1's ref_conv
  if (c.vace()) {  // a block and after_proj per VACE layer, before_proj once, vace_patch_embedding
    total += int64_t(c.vace_layers.size()) * (block + linear_dd) + linear_dd + d * c.vace_in_dim * pv + d;
  }
  return total;
}

nlohmann::json tiny_json() {
  return nlohmann::json::parse(R"({"dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2, "freq_dim": 256,
    "text_dim": 64, "text_len": 16, "patch_size": [1, 2, 2], "in_dim": 16, "out_dim": 16, "eps": 1e-6,
    "qk_norm": true, "cross_attn_norm": true})");
}

std::string error_of(const nlohmann::json& doc) {
  try {
    wt::wan::parse_model_config(doc.dump(), "test.json");
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ModelConfig, ShippedConfigsLoad) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs")) {
    SCOPED_TRACE(entry.path().string());
    const auto config = wt::wan::load_model_config(entry.path().string());
    EXPECT_EQ(wt::wan::parameter_count(config), count_by_formula(config));
  }
}

TEST(ModelConfig, RealConfigsHaveTheirPublishedSizes) {
  const std::pair<const char*, double> published[] = {{"wan2.1-t2v-1.3b", 1.419e9},
                                                      {"wan2.1-t2v-14b", 14.29e9},
                                                      {"wan2.2-ti2v-5b", 5.00e9},
                                                      {"wan2.2-t2v-a14b", 14.29e9}};  // one expert of two
  for (const auto& [name, size] : published) {
    SCOPED_TRACE(name);
    const auto config = wt::wan::load_model_config(config_path(name));
    const int64_t count = wt::wan::parameter_count(config);
    EXPECT_EQ(count, count_by_formula(config));
    EXPECT_NEAR(double(count) / size, 1.0, 1e-3) << count;
    EXPECT_EQ(config.head_dim(), 128);  // every Wan release uses 128-channel heads
  }
}

TEST(ModelConfig, ModelParametersAreExactlyTheDerivedShapes) {
  auto config = wt::wan::parse_model_config(tiny_json().dump(), "tiny");
  for (bool qk_norm : {true, false})
    for (bool cross_attn_norm : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "qk_norm " << qk_norm << " cross_attn_norm " << cross_attn_norm);
      config.qk_norm = qk_norm;
      config.cross_attn_norm = cross_attn_norm;
      wt::wan::WanModel model(config);
      const auto expected = wt::wan::parameter_shapes(config);
      const auto params = model->named_parameters();
      ASSERT_EQ(params.size(), expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(params[i].key(), expected[i].first);
        EXPECT_EQ(params[i].value().sizes().vec(), expected[i].second) << expected[i].first;
      }
    }
}

TEST(ModelConfig, EachMissingKeyIsNamed) {
  const auto complete = tiny_json();
  for (const auto& item : complete.items()) {
    auto doc = tiny_json();
    doc.erase(item.key());
    EXPECT_EQ(error_of(doc), "model config test.json: missing key '" + item.key() + "'");
  }
}

TEST(ModelConfig, WrongKeysAndValuesAreNamed) {
  auto doc = tiny_json();
  doc["num_head"] = 4;
  EXPECT_NE(error_of(doc).find("unknown key 'num_head'"), std::string::npos) << error_of(doc);
  doc = tiny_json();
  doc["dim"] = "64";
  EXPECT_NE(error_of(doc).find("'dim' must be a positive integer"), std::string::npos) << error_of(doc);
  doc = tiny_json();
  doc["num_heads"] = 5;
  EXPECT_NE(error_of(doc).find("'dim' 64 is not divisible by 'num_heads' 5"), std::string::npos) << error_of(doc);
  doc = tiny_json();
  doc["dim"] = 12;
  doc["num_heads"] = 4;  // head dim 3
  EXPECT_NE(error_of(doc).find("must be even"), std::string::npos) << error_of(doc);
  doc = tiny_json();
  doc["patch_size"] = {1, 2};
  EXPECT_NE(error_of(doc).find("'patch_size' must be three positive integers"), std::string::npos) << error_of(doc);
  doc = tiny_json();
  doc["qk_norm"] = 1;
  EXPECT_NE(error_of(doc).find("'qk_norm' must be true or false"), std::string::npos) << error_of(doc);
  EXPECT_NE(error_of(nlohmann::json::array()).find("expected a JSON object"), std::string::npos);
  try {
    wt::wan::parse_model_config("{\"dim\": ", "broken.json");
    FAIL() << "no error for broken JSON";
  } catch (const wt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model config broken.json: not valid JSON"), std::string::npos) << e.what();
  }
}

// Hostile configs are refused before anything is sized from them: caps on
// every size, a bounded parameter count, JSON nesting, long values shortened.
TEST(ModelConfig, HostileConfigsAreRefusedWithOneLine) {
  for (const auto& [key, value, expected] :
       {std::tuple<const char*, int64_t, std::string>{"num_layers", int64_t(1) << 40,
                                                      "'num_layers' is 1099511627776, more than 1024"},
        {"dim", int64_t(1) << 20, "'dim' is 1048576, more than 65536"},
        {"ffn_dim", int64_t(1) << 30, "'ffn_dim' is 1073741824, more than 262144"},
        {"text_len", int64_t(1) << 40, "'text_len' is 1099511627776, more than 1048576"}}) {
    auto doc = tiny_json();
    doc[key] = value;
    EXPECT_NE(error_of(doc).find(expected), std::string::npos) << error_of(doc);
  }
  // Each size within its cap, the whole beyond a trillion parameters.
  auto big = tiny_json();
  big["dim"] = 65536;
  big["num_heads"] = 512;
  big["ffn_dim"] = 262144;
  big["num_layers"] = 1024;
  EXPECT_NE(error_of(big).find("parameters, more than 1e+12"), std::string::npos) << error_of(big);
  auto patch = tiny_json();
  patch["patch_size"] = {1, 2, 1000};
  EXPECT_NE(error_of(patch).find("'patch_size' must hold three integers in 1..64"), std::string::npos)
      << error_of(patch);

  const std::string deep = "{\"dim\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    wt::wan::parse_model_config(deep, "deep.json");
    FAIL() << "no error for deeply nested JSON";
  } catch (const wt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model config deep.json: not valid JSON (nested deeper than 32 levels"),
              std::string::npos)
        << e.what();
  }
  auto long_value = tiny_json();
  long_value["eps"] = std::string(100000, 'x');
  EXPECT_LT(error_of(long_value).size(), 200u) << error_of(long_value);
}

TEST(ModelConfig, JsonRoundTrip) {
  const auto config = wt::wan::load_model_config(config_path("wan2.2-ti2v-5b"));
  const auto again = wt::wan::parse_model_config(wt::wan::to_json(config), "round trip");
  EXPECT_EQ(wt::wan::parameter_shapes(again), wt::wan::parameter_shapes(config));
  EXPECT_EQ(again.eps, config.eps);
}

// The image-to-video keys: optional (a t2v config reads and writes as it
// always has), checked against each other and the channels.
TEST(ModelConfig, ImageToVideoKeysAreOptionalAndChecked) {
  auto doc = tiny_json();
  EXPECT_EQ(wt::wan::to_json(wt::wan::parse_model_config(doc.dump(), "t2v")).find("model_type"), std::string::npos);
  doc["model_type"] = "i2v";
  doc["in_dim"] = 2 * doc["out_dim"].get<int64_t>() + 4;
  doc["image_dim"] = 32;
  const auto i2v = wt::wan::parse_model_config(doc.dump(), "i2v");
  EXPECT_EQ(i2v.model_type, wt::wan::ModelType::I2V);
  EXPECT_TRUE(i2v.image_branch());
  EXPECT_EQ(i2v.condition_channels(), doc["out_dim"].get<int64_t>() + 4);
  const auto again = wt::wan::parse_model_config(wt::wan::to_json(i2v), "round trip");
  EXPECT_EQ(wt::wan::parameter_shapes(again), wt::wan::parameter_shapes(i2v));
  EXPECT_EQ(again.model_type, wt::wan::ModelType::I2V);

  auto bad = doc;
  bad["model_type"] = "s2v";
  EXPECT_EQ(error_of(bad),
            "model config test.json: 'model_type' must be one of t2v, i2v, flf2v, ti2v, vace, got \"s2v\"");
  bad = doc;
  bad["in_dim"] = doc["out_dim"];
  EXPECT_NE(error_of(bad).find("so 'in_dim' must be 2 * out_dim + 4"), std::string::npos) << error_of(bad);
  bad = doc;
  bad["model_type"] = "t2v";
  bad["in_dim"] = doc["out_dim"];
  EXPECT_NE(error_of(bad).find("'image_dim' 32 is for an i2v or flf2v model"), std::string::npos) << error_of(bad);
  bad = doc;
  bad["model_type"] = "flf2v";
  bad["image_dim"] = 0;
  EXPECT_NE(error_of(bad).find("'model_type' flf2v needs the CLIP branch"), std::string::npos) << error_of(bad);
  // VideoX-Fun's Wan2.1-Fun-Control (i2v with in_dim 3 out_dim): y holds
  // the control's and the start frame's latents; V1.1's ref_conv reads a
  // latent frame. Its keys round-trip as VideoX-Fun writes them.
  const int64_t out = doc["out_dim"].get<int64_t>();
  auto fun = doc;
  fun["in_dim"] = 3 * out;
  fun["add_ref_conv"] = true;
  fun["in_dim_ref_conv"] = out;
  fun["add_control_adapter"] = false;
  fun["in_dim_control_adapter"] = 24;
  const auto control = wt::wan::parse_model_config(fun.dump(), "fun");
  EXPECT_TRUE(control.fun_control());
  EXPECT_TRUE(control.ref_conv);
  EXPECT_EQ(control.condition_channels(), 2 * out);
  const auto shapes = wt::wan::parameter_shapes(control);
  EXPECT_NE(
      std::find(shapes.begin(), shapes.end(), wt::wan::ParameterShape{"ref_conv.weight", {control.dim, out, 2, 2}}),
      shapes.end());
  const auto stored = nlohmann::json::parse(wt::wan::to_json(control));
  EXPECT_EQ(stored["model_type"], "i2v");
  EXPECT_EQ(stored["add_ref_conv"], true);
  EXPECT_EQ(wt::wan::parameter_shapes(wt::wan::parse_model_config(stored.dump(), "round trip")), shapes);
  EXPECT_FALSE(i2v.fun_control());
  bad = fun;
  bad["in_dim_ref_conv"] = out + 1;
  EXPECT_EQ(error_of(bad), fmt::format("model config test.json: 'in_dim_ref_conv' {} must equal 'out_dim' {} "
                                       "(ref_conv reads a reference picture's latents)",
                                       out + 1, out));
  bad = doc;
  bad["add_ref_conv"] = true;
  EXPECT_EQ(error_of(bad),
            fmt::format("model config test.json: 'add_ref_conv' is for a Fun-Control model "
                        "('model_type' i2v, 'in_dim' 3 * out_dim = {} or 3 * out_dim + 4 = {}); this one is i2v with "
                        "'in_dim' {}",
                        3 * out, 3 * out + 4, 2 * out + 4));
  bad = fun;
  bad["add_control_adapter"] = true;
  EXPECT_EQ(error_of(bad),
            "model config test.json: 'add_control_adapter' is VideoX-Fun's camera-control adapter "
            "(Wan-Fun-Control-Camera): wantrain takes Fun-Control models without it, not with it yet");
  // Wan2.2-Fun's layout: the control's latents, then a mask and the start
  // frame's latents (in_dim 3 out_dim + 4), with or without ref_conv.
  auto fun22 = fun;
  fun22["in_dim"] = 3 * out + 4;
  const auto masked = wt::wan::parse_model_config(fun22.dump(), "fun22");
  EXPECT_TRUE(masked.fun_control());
  EXPECT_TRUE(masked.fun_control_with_mask());
  EXPECT_FALSE(control.fun_control_with_mask());
  EXPECT_TRUE(masked.ref_conv);
  EXPECT_EQ(masked.condition_channels(), 2 * out + 4);
  EXPECT_FALSE(masked.holds_start_frame());  // not on the Wan2.2 VAE's 48 channels
  // Wan2.2-Fun-5B-Control: the same layout on 48 channels holds its start;
  // its config may call it ti2v (TI2V-5B's), read as i2v.
  for (const char* type : {"i2v", "ti2v"}) {
    auto five = fun22;
    five["model_type"] = type;
    five["out_dim"] = 48;
    five["in_dim"] = 3 * 48 + 4;
    five["in_dim_ref_conv"] = 48;
    const auto held = wt::wan::parse_model_config(five.dump(), "five");
    EXPECT_TRUE(held.fun_control_with_mask()) << type;
    EXPECT_TRUE(held.holds_start_frame()) << type;
    EXPECT_EQ(held.model_type, wt::wan::ModelType::I2V) << type;
  }
  const auto shipped5b = wt::wan::load_model_config(config_path("wan2.2-fun-5b-control"));
  EXPECT_TRUE(shipped5b.holds_start_frame() && shipped5b.ref_conv && !shipped5b.image_branch());
  // TI2V-5B's base differs from it only by the patch embedding's input channels.
  EXPECT_EQ(wt::wan::parameter_count(shipped5b) -
                wt::wan::parameter_count(wt::wan::load_model_config(config_path("wan2.2-ti2v-5b"))),
            (148 - 48) * 3072 * 4 + 48 * 3072 * 4 + 3072);  // patch embedding's extra inputs, ref_conv
  auto ti2v = doc;
  ti2v["model_type"] = "ti2v";
  ti2v["in_dim"] = out + 1;
  EXPECT_EQ(error_of(ti2v), fmt::format("model config test.json: 'model_type' ti2v reads the latents alone, so "
                                        "'in_dim' must be out_dim = {} (or 3 * out_dim + 4 = {}: "
                                        "Wan2.2-Fun-5B-Control's control and start frame), got {}",
                                        out, 3 * out + 4, out + 1));
  ti2v["in_dim"] = 2 * out + 4;
  EXPECT_NE(error_of(ti2v).find("(2 * out_dim + 4: VideoX-Fun's Wan2.2-Fun-5B-InP, not in wantrain yet)"),
            std::string::npos)
      << error_of(ti2v);
  // At out_dim 4, in_dim 12 is both 3 out_dim and 2 out_dim + 4: an i2v model's.
  auto four = doc;
  four["out_dim"] = 4;
  four["in_dim"] = 12;
  EXPECT_FALSE(wt::wan::parse_model_config(four.dump(), "four").fun_control());
  bad = doc;
  bad["in_dim"] = 3 * out + 5;
  EXPECT_NE(error_of(bad).find("(or 3 * out_dim = " + std::to_string(3 * out) + " or 3 * out_dim + 4 = " +
                               std::to_string(3 * out + 4) + ": a Fun-Control model's control and start frame)"),
            std::string::npos)
      << error_of(bad);
}

// The transformer config.json of the Wan-AI *-Diffusers repositories (the
// values published there) reads as the shipped config of the same release.
TEST(ModelConfig, DiffusersConfigsOfTheReleasesReadAsTheShippedConfigs) {
  auto diffusers = [](int heads, int in, int out, int ffn, int layers, const std::string& image) {
    return fmt::format(
        R"({{"_class_name": "WanTransformer3DModel", "_diffusers_version": "0.33.0", "patch_size": [1, 2, 2],
            "num_attention_heads": {}, "attention_head_dim": 128, "in_channels": {}, "out_channels": {},
            "text_dim": 4096, "freq_dim": 256, "ffn_dim": {}, "num_layers": {}, "cross_attn_norm": true,
            "qk_norm": "rms_norm_across_heads", "eps": 1e-06, "rope_max_seq_len": 1024, {}}})",
        heads, in, out, ffn, layers, image);
  };
  const std::string none = R"("image_dim": null, "added_kv_proj_dim": null)";
  for (const auto& [shipped, json] :
       {std::pair{"wan2.1-t2v-1.3b", diffusers(12, 16, 16, 8960, 30, none)},
        {"wan2.1-t2v-14b", diffusers(40, 16, 16, 13824, 40, none)},
        {"wan2.1-i2v-14b-480p", diffusers(40, 36, 16, 13824, 40, R"("image_dim": 1280, "added_kv_proj_dim": 5120)")},
        {"wan2.1-flf2v-14b",
         diffusers(40, 36, 16, 13824, 40, R"("image_dim": 1280, "added_kv_proj_dim": 5120, "pos_embed_seq_len": 514)")},
        {"wan2.2-t2v-a14b", diffusers(40, 16, 16, 13824, 40, none)},
        {"wan2.2-i2v-a14b", diffusers(40, 36, 16, 13824, 40, none)},
        {"wan2.2-ti2v-5b", diffusers(24, 48, 48, 14336, 30, none)}}) {
    const auto config = wt::wan::parse_diffusers_config(json, shipped);
    const auto expected =
        wt::wan::load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/" + shipped + ".json");
    EXPECT_EQ(wt::wan::first_difference(config, expected), "") << shipped;
  }
  // A value of another type, or of a kind Wan has not, is one line naming the file.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {diffusers(12, 16, 16, 8960, 30, R"("image_dim": null, "added_kv_proj_dim": null, "patch_size": ["1", 2, 2])"),
       "wrong type"},
      {R"({"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2]})", "key \"num_attention_heads\""},
      {diffusers(12, 16, 16, 8960, 30, R"("image_dim": null, "added_kv_proj_dim": null, "eps": "small")"),
       "wrong type"},
      {R"({"_class_name": "UNet2DConditionModel"})", "not a WanTransformer3DModel"}};
  for (const auto& [json, why] : bad) {
    try {
      wt::wan::parse_diffusers_config(json, "transformer/config.json");
      ADD_FAILURE() << json;
    } catch (const wt::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("transformer/config.json: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// Wan2.1-VACE's keys: the official defaults (a hint after every second
// block, a context as wide as the latents), the layout checked, the keys
// refused on another model, kept through JSON; the names of VaceWanModel
// and of diffusers' WanVACETransformer3DModel map both ways.
TEST(ModelConfig, VaceKeysDefaultAsReleasedAndAreChecked) {
  auto doc = tiny_json();
  doc["model_type"] = "vace";
  doc["num_layers"] = 5;
  const auto vace = wt::wan::parse_model_config(doc.dump(), "test.json");
  EXPECT_TRUE(vace.vace());
  EXPECT_EQ(vace.vace_layers, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(vace.vace_in_dim, 16);
  const auto again = wt::wan::parse_model_config(wt::wan::to_json(vace), "again");
  EXPECT_EQ(wt::wan::first_difference(again, vace), "");
  for (const auto& [layers, bad] :
       {std::pair{"[0, 3, 2]", "0,3,2"}, {"[1, 3]", "1,3"}, {"[0, 5]", "0,5"}, {"[]", ""}}) {
    doc["vace_layers"] = nlohmann::json::parse(layers);
    EXPECT_EQ(error_of(doc), std::string("model config test.json: 'vace_layers' must list base blocks in ascending "
                                         "order from 0, each below num_layers 5, got [") +
                                 bad + "]");
  }
  doc["vace_layers"] = {0, 2};
  doc["vace_in_dim"] = 0;
  EXPECT_EQ(error_of(doc), "model config test.json: 'vace_in_dim' must be a positive integer, got 0");
  auto t2v = tiny_json();
  t2v["vace_in_dim"] = 96;
  EXPECT_EQ(error_of(t2v),
            "model config test.json: 'vace_layers' and 'vace_in_dim' are for a VACE model; "
            "'model_type' is t2v");
  for (const auto& [official, diffusers] :
       {std::pair{"vace_blocks.0.before_proj.weight", "vace_blocks.0.proj_in.weight"},
        {"vace_blocks.7.after_proj.bias", "vace_blocks.7.proj_out.bias"},
        {"vace_blocks.1.self_attn.q.weight", "vace_blocks.1.attn1.to_q.weight"},
        {"vace_blocks.1.norm3.weight", "vace_blocks.1.norm2.weight"},
        {"vace_patch_embedding.weight", "vace_patch_embedding.weight"}}) {
    EXPECT_EQ(wt::wan::diffusers_name(official), diffusers);
    EXPECT_EQ(wt::wan::official_name(diffusers), official);
  }
  // VaceWanModel's release config (its class, Wan's keys) is not read as a diffusers one.
  auto release = tiny_json();
  release["_class_name"] = "VaceWanModel";
  release["model_type"] = "vace";
  std::ofstream(::testing::TempDir() + "/vace-release.json") << release.dump();
  EXPECT_TRUE(wt::wan::load_model_config(::testing::TempDir() + "/vace-release.json").vace());
}
