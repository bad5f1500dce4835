// Hostile diffusers model folders (docs/model.md, "Files a folder names"):
// model_index.json is the truth about a pipeline's components, an A14B
// folder never serves one expert, and every file a folder names lies in it.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../../common/small_models.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/model/diffusers_export.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace model_folder_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A small model as a diffusers config gives it: 512 text tokens.
wt::wan::WanConfig small_config() {
  auto c = wt::testing::small_wan_config();
  c.text_len = 512;
  return c;
}

// The error's text, or "(no error)".
template <typename F>
std::string error_of(F&& read) {
  try {
    read();
  } catch (const wt::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

class ModelFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wantrain-model-folder-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A pipeline root with `components` saved as diffusers does (shards of
  // `shard_bytes`) and model_index.json naming `named` with `index_extra`.
  std::string pipeline(const std::string& name, const std::vector<std::string>& components,
                       const std::vector<std::string>& named, const json& index_extra = json::object(),
                       double shard_bytes = 1e9) {
    const fs::path root = dir_ / name;
    fs::create_directories(root);
    torch::manual_seed(3);
    wt::wan::WanModel model(small_config());
    for (const auto& component : components)
      wt::wan::save_diffusers_folder(*model, small_config(), root.string(), torch::kFloat32, shard_bytes, component);
    json index = {{"_class_name", "WanPipeline"}, {"_diffusers_version", "0.42.1"}};
    for (const auto& component : named) index[component] = {"diffusers", "WanTransformer3DModel"};
    index.update(index_extra);
    std::ofstream(root / "model_index.json") << index.dump(2);
    return root.string();
  }
  fs::path dir_;
};

}  // namespace

TEST_F(ModelFolder, AComponentTheIndexNamesButTheFolderLacksIsOneLineForEveryReader) {
  // Wan2.2 A14B with transformer_2/ lost: before, transformer/ alone served every step.
  const auto root = pipeline("a14b", {"transformer"}, {"transformer", "transformer_2"}, {{"boundary_ratio", 0.875}});
  const std::string line = root + ": model_index.json names the component transformer_2 (WanTransformer3DModel), but " +
                           root + "/transformer_2/ is missing";
  EXPECT_NE(error_of([&] { wt::wan::find_two_experts(root); }).find(line), std::string::npos);  // wansample --weights
  EXPECT_NE(error_of([&] { wt::wan::open_weights(root); }).find(line), std::string::npos);  // --init, --teacher, ...
  EXPECT_NE(error_of([&] { wt::wan::load_model_config(root); }).find(line), std::string::npos);  // --model-config

  // A component folder that is there but empty, and one without weights.
  fs::create_directories(root + "/transformer_2");
  EXPECT_NE(error_of([&] { wt::wan::find_two_experts(root); }).find("transformer_2/ has no config.json"),
            std::string::npos);
  fs::copy_file(root + "/transformer/config.json", root + "/transformer_2/config.json");
  EXPECT_NE(error_of([&] {
              wt::wan::find_two_experts(root);
            }).find("transformer_2/ has no diffusion_pytorch_model.safetensors nor its shards'"),
            std::string::npos);

  // Any component a reader asks for: the VAE's folder, named and missing.
  const auto vae = pipeline("no-vae", {"transformer"}, {"transformer"}, {{"vae", {"diffusers", "AutoencoderKLWan"}}});
  EXPECT_NE(error_of([&] {
              wt::wan::find_model_folder(vae, "vae", "diffusion_pytorch_model");
            }).find("model_index.json names the component vae (AutoencoderKLWan), but " + vae + "/vae/ is missing"),
            std::string::npos);
}

TEST_F(ModelFolder, ATwoExpertFolderGivesBothOrNothing) {
  const auto root =
      pipeline("a14b", {"transformer", "transformer_2"}, {"transformer", "transformer_2"}, {{"boundary_ratio", 0.9}});
  const auto experts = wt::wan::find_two_experts(root);
  ASSERT_TRUE(experts);
  EXPECT_EQ(experts->high_noise, root + "/transformer");
  EXPECT_EQ(experts->low_noise, root + "/transformer_2");
  EXPECT_EQ(experts->boundary_ratio, 0.9);
  // Where one model is read, the pair is refused rather than its first expert taken.
  const std::string refusal =
      root + ": holds two experts, transformer/ the high-noise one and transformer_2/ the low-noise one";
  EXPECT_NE(error_of([&] { wt::wan::open_weights(root); }).find(refusal), std::string::npos);
  // A config is not a model: the experts' shared one is the root's.
  EXPECT_EQ(wt::wan::to_json(wt::wan::load_model_config(root)), wt::wan::to_json(small_config()));
  // Each expert's own folder is one model.
  EXPECT_EQ(error_of([&] { wt::wan::open_weights(root + "/transformer_2"); }), "(no error)");

  // A Wan2.1 pipeline as diffusers saves it now: transformer_2 [null, null] is no component.
  const auto one = pipeline("wan21", {"transformer"}, {"transformer"},
                            {{"transformer_2", {nullptr, nullptr}}, {"boundary_ratio", nullptr}});
  EXPECT_FALSE(wt::wan::find_two_experts(one));
  EXPECT_EQ(wt::wan::find_transformer_folder(one)->folder, one + "/transformer");
}

TEST_F(ModelFolder, ABoundaryRatioOutsideZeroToOneIsOneLine) {
  for (const json& ratio : {json(7), json(0), json(1), json(-0.5), json("0.9"), json(1.0000001)}) {
    const auto root = pipeline("a14b", {"transformer", "transformer_2"}, {"transformer", "transformer_2"},
                               {{"boundary_ratio", ratio}});
    EXPECT_NE(
        error_of([&] {
          wt::wan::find_two_experts(root);
        }).find(root + "/model_index.json: key \"boundary_ratio\": " + ratio.dump() + " is not a number in (0, 1)"),
        std::string::npos)
        << ratio;
    fs::remove_all(root);
  }
  const auto bad = pipeline("bad", {"transformer"}, {"transformer"}, {{"vae", "AutoencoderKLWan"}});
  std::ofstream(bad + "/model_index.json") << R"({"transformer": ["diffusers"]})";
  EXPECT_NE(error_of([&] {
              wt::wan::find_transformer_folder(bad);
            }).find("key \"transformer\": [\"diffusers\"] is not a component's [library, class]"),
            std::string::npos);
}

TEST_F(ModelFolder, AnIndexThatNamesAFileOutsideItsFolderIsRefusedBeforeAnythingIsRead) {
  // Shards and their index; then the index's last entry names a copy of its shard two folders up.
  const auto root = pipeline("sharded", {"transformer"}, {"transformer"}, json::object(), 20000);
  const std::string index_file = root + "/transformer/diffusion_pytorch_model.safetensors.index.json";
  ASSERT_TRUE(fs::exists(index_file));
  EXPECT_EQ(error_of([&] { wt::wan::open_weights(root); }), "(no error)");
  auto index = json::parse(wt::read_whole_file(index_file));
  const std::string tensor = index["weight_map"].begin().key();
  const std::string shard = index["weight_map"].begin().value();
  fs::copy_file(root + "/transformer/" + shard, dir_ / "outside.safetensors");
  for (const std::string& name : {std::string("../../outside.safetensors"), (dir_ / "outside.safetensors").string(),
                                  std::string("escape.safetensors")}) {
    if (name == "escape.safetensors") fs::create_symlink(dir_ / "outside.safetensors", root + "/transformer/" + name);
    index["weight_map"][tensor] = name;
    std::ofstream(index_file) << index.dump(2);
    const auto what = error_of([&] { wt::wan::open_weights(root); });
    EXPECT_NE(what.find("weights index " + index_file + ": tensor '" + tensor +
                        "' names a file outside the index's folder: " + name),
              std::string::npos)
        << what;
  }
}

TEST_F(ModelFolder, AFolderWhoseOwnFilesLinkOutsideIsRefused) {
  const auto root = pipeline("linked", {"transformer"}, {"transformer"});
  const std::string weights = root + "/transformer/diffusion_pytorch_model.safetensors";
  fs::rename(weights, dir_ / "elsewhere.safetensors");
  fs::create_symlink(dir_ / "elsewhere.safetensors", weights);
  EXPECT_NE(error_of([&] { wt::wan::open_weights(root); })
                .find("diffusion_pytorch_model.safetensors resolves to " +
                      (fs::canonical(dir_) / "elsewhere.safetensors").string()),
            std::string::npos);
  // The component folder itself, a link out of the pipeline.
  const auto other = pipeline("other", {}, {"transformer"});
  fs::create_directory_symlink(root + "/transformer", other + "/transformer");
  fs::remove(weights);
  fs::rename(dir_ / "elsewhere.safetensors", weights);
  EXPECT_NE(error_of([&] { wt::wan::open_weights(other); }).find("transformer resolves to"), std::string::npos);
  EXPECT_EQ(error_of([&] { wt::wan::open_weights(root); }), "(no error)");
}

}  // namespace model_folder_test
