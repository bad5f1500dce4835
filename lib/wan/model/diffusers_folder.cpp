#include "wantrain/wan/model/diffusers_folder.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"

namespace wt::wan {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::optional<ModelFolder> component_in(const fs::path& folder, const std::string& stem) {
  std::error_code error;
  if (!fs::is_regular_file(folder / "config.json", error)) return std::nullopt;
  for (const auto& name : {stem + ".safetensors.index.json", stem + ".safetensors"})
    if (fs::is_regular_file(folder / name, error))
      return ModelFolder{folder.string(), (folder / "config.json").string(), (folder / name).string()};
  return std::nullopt;
}

}  // namespace

std::optional<ModelFolder> find_model_folder(const std::string& path, const std::string& component,
                                             const std::string& stem) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return std::nullopt;
  if (auto found = component_in(path, stem)) return found;
  if (auto found = component_in(fs::path(path) / component, stem)) return found;
  throw UsageError(fmt::format(
      "{}: a folder with no model in it: a diffusers {} folder holds config.json and {}.safetensors (or its "
      "shards' .safetensors.index.json), here or in {}/",
      path, component, stem, component));
}

std::optional<ModelFolder> find_transformer_folder(const std::string& path) {
  return find_model_folder(path, "transformer", "diffusion_pytorch_model");
}

std::optional<TwoExperts> find_two_experts(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(fs::path(path) / "transformer_2", error)) return std::nullopt;
  const auto high = component_in(fs::path(path) / "transformer", "diffusion_pytorch_model");
  const auto low = component_in(fs::path(path) / "transformer_2", "diffusion_pytorch_model");
  if (!high || !low)
    throw UsageError(
        fmt::format("{}: a two-expert pipeline folder needs transformer/ and transformer_2/, each with "
                    "config.json and diffusion_pytorch_model.safetensors (or its index); {}/ has not",
                    path, high ? "transformer_2" : "transformer"));
  TwoExperts experts{high->folder, low->folder, std::nullopt};
  const fs::path index = fs::path(path) / "model_index.json";
  if (fs::is_regular_file(index, error)) {
    const auto doc = json::parse(read_whole_file(index.string()), nullptr, false);
    if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object", index.string()));
    if (doc.contains("boundary_ratio") && !doc["boundary_ratio"].is_null()) {
      if (!doc["boundary_ratio"].is_number())
        throw UsageError(fmt::format("{}: key \"boundary_ratio\": not a number", index.string()));
      experts.boundary_ratio = doc["boundary_ratio"].get<double>();
    }
  }
  return experts;
}

bool is_diffusers_config(const std::string& json_text) {
  const auto doc = json::parse(json_text, nullptr, false);
  // The official release's config.json names its own class, WanModel, over
  // Wan's keys: not a diffusers config.
  return doc.is_object() && doc.contains("_class_name") && doc["_class_name"] != "WanModel";
}

namespace {

WanConfig parse_checked(const std::string& json_text, const std::string& source);

}  // namespace

WanConfig parse_diffusers_config(const std::string& json_text, const std::string& source) {
  try {
    return parse_checked(json_text, source);
  } catch (const json::exception& e) {  // a value of another type than the key's
    throw UsageError(fmt::format("{}: a value of the wrong type: {}", source, e.what()));
  }
}

namespace {

WanConfig parse_checked(const std::string& json_text, const std::string& source) {
  const auto doc = json::parse(json_text, nullptr, false);
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object", source));
  const std::string class_name = doc.value("_class_name", std::string());
  if (class_name != "WanTransformer3DModel")
    throw UsageError(fmt::format("{}: _class_name \"{}\": not a WanTransformer3DModel (the Wan DiT's diffusers class)",
                                 source, class_name));
  auto integer = [&](const char* key) -> int64_t {
    if (!doc.contains(key) || !doc[key].is_number_integer())
      throw UsageError(fmt::format("{}: key \"{}\": missing or not an integer", source, key));
    return doc[key].get<int64_t>();
  };
  auto optional_integer = [&](const char* key) -> int64_t {
    if (!doc.contains(key) || doc[key].is_null()) return 0;
    return integer(key);
  };
  WanConfig c;
  c.num_heads = integer("num_attention_heads");
  c.dim = c.num_heads * integer("attention_head_dim");
  c.ffn_dim = integer("ffn_dim");
  c.num_layers = integer("num_layers");
  c.freq_dim = integer("freq_dim");
  c.text_dim = integer("text_dim");
  c.text_len = 512;  // WanPipeline's max_sequence_length; the image branch splits its context at 512 text tokens
  c.in_dim = integer("in_channels");
  c.out_dim = integer("out_channels");
  if (!doc.contains("patch_size") || !doc["patch_size"].is_array() || doc["patch_size"].size() != 3)
    throw UsageError(fmt::format("{}: key \"patch_size\": missing or not three integers", source));
  for (size_t i = 0; i < 3; ++i) c.patch_size[i] = doc["patch_size"][i].get<int64_t>();
  c.eps = doc.value("eps", 1e-6);
  c.cross_attn_norm = doc.value("cross_attn_norm", true);
  const auto qk_norm = doc.contains("qk_norm") && !doc["qk_norm"].is_null() ? doc["qk_norm"].get<std::string>() : "";
  if (!qk_norm.empty() && qk_norm != "rms_norm_across_heads")
    throw UsageError(
        fmt::format("{}: key \"qk_norm\": \"{}\" is not Wan's (rms_norm_across_heads, or null)", source, qk_norm));
  c.qk_norm = !qk_norm.empty();
  c.image_dim = optional_integer("image_dim");
  const int64_t pos_embed = optional_integer("pos_embed_seq_len");
  const int64_t added_kv = optional_integer("added_kv_proj_dim");
  if (c.image_dim > 0) {
    if (added_kv != c.dim)
      throw UsageError(
          fmt::format("{}: key \"added_kv_proj_dim\": {} with image_dim {}: Wan's image branch projects "
                      "to the model's width, {}",
                      source, added_kv, c.image_dim, c.dim));
    c.model_type = pos_embed > 0 ? ModelType::FLF2V : ModelType::I2V;
    if (pos_embed > 0) c.image_tokens = pos_embed / 2;  // two pictures' CLIP tokens
  } else if (c.in_dim == 2 * c.out_dim + 4) {
    c.model_type = ModelType::I2V;  // Wan2.2 I2V-A14B: y joined, no CLIP branch
  } else if (c.in_dim == 48 && c.out_dim == 48) {
    c.model_type = ModelType::TI2V;  // the Wan2.2 VAE's latents: TI2V-5B
  }
  validate(c, source);
  return c;
}

}  // namespace

}  // namespace wt::wan
