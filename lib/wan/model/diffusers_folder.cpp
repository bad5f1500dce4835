#include "wantrain/wan/model/diffusers_folder.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/folder_paths.hpp"

namespace wt::wan {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kTransformerStem = "diffusion_pytorch_model";

// `name`, a file or folder that `folder` holds, refused when it leads out of `within` (a pipeline's root, or the
// folder itself).
void check_inside(const fs::path& folder, const std::string& name, const fs::path& within = {}) {
  if (const auto why = outside_folder_reason(folder.string(), name, within.string()); !why.empty())
    throw UsageError(
        fmt::format("{}: {}: a model folder's files lie inside it (docs/model.md, \"Files a folder "
                    "names\")",
                    folder.string(), why));
}

// What keeps `folder` from being a component folder of `stem`'s weights; empty when it is one.
std::string component_problem(const fs::path& folder, const std::string& stem) {
  std::error_code error;
  if (!fs::is_directory(folder, error)) return "is missing";
  if (!fs::is_regular_file(folder / "config.json", error)) return "has no config.json";
  for (const auto& name : {stem + ".safetensors.index.json", stem + ".safetensors"})
    if (fs::is_regular_file(folder / name, error)) return {};
  return fmt::format("has no {}.safetensors nor its shards' .safetensors.index.json", stem);
}

ModelFolder component_at(const fs::path& folder, const std::string& stem, const fs::path& within = {}) {
  check_inside(folder, "config.json", within);
  std::error_code error;
  for (const auto& name : {stem + ".safetensors.index.json", stem + ".safetensors"})
    if (fs::is_regular_file(folder / name, error)) {
      check_inside(folder, name, within);
      return ModelFolder{folder.string(), (folder / "config.json").string(), (folder / name).string()};
    }
  throw UsageError(fmt::format("{}: no {} weights", folder.string(), stem));  // component_problem said it had
}

std::optional<ModelFolder> component_in(const fs::path& folder, const std::string& stem) {
  if (!component_problem(folder, stem).empty()) return std::nullopt;
  return component_at(folder, stem);
}

// ROOT/`component`, which model_index.json names or a two-expert root needs: one line when it is not complete.
ModelFolder required_component(const fs::path& root, const std::optional<PipelineIndex>& index,
                               const std::string& component, const std::string& stem) {
  if (const auto problem = component_problem(root / component, stem); !problem.empty()) {
    if (index && index->names(component))
      throw UsageError(
          fmt::format("{}: model_index.json names the component {} ({}), but {}/ {} (an interrupted "
                      "download, or a copy that left it out?)",
                      root.string(), component, index->components.at(component), (root / component).string(), problem));
    throw UsageError(
        fmt::format("{}: a two-expert pipeline folder holds transformer/ and transformer_2/, each with "
                    "config.json and {}.safetensors (or its shards' index); {}/ {}",
                    root.string(), stem, component, problem));
  }
  check_inside(root, component);
  return component_at(root / component, stem, root);
}

}  // namespace

std::optional<PipelineIndex> read_pipeline_index(const std::string& root) {
  std::error_code error;
  const fs::path file = fs::path(root) / "model_index.json";
  if (!fs::exists(file, error)) return std::nullopt;
  check_inside(root, "model_index.json");
  const auto doc = json::parse(read_whole_file(file.string()), nullptr, false);
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object", file.string()));
  PipelineIndex index;
  index.file = file.string();
  for (const auto& [key, value] : doc.items()) {
    if (key.empty() || key[0] == '_' || !value.is_array()) continue;  // the pipeline's own settings
    const bool pair = value.size() == 2 && (value[0].is_string() || value[0].is_null()) &&
                      (value[1].is_string() || value[1].is_null());
    if (!pair)
      throw UsageError(
          fmt::format("{}: key \"{}\": {} is not a component's [library, class]", file.string(), key, value.dump()));
    if (value[1].is_string()) index.components[key] = value[1].get<std::string>();
  }
  if (doc.contains("boundary_ratio") && !doc["boundary_ratio"].is_null()) {
    const auto& ratio = doc["boundary_ratio"];
    if (!ratio.is_number() || !(ratio.get<double>() > 0 && ratio.get<double>() < 1))
      throw UsageError(
          fmt::format("{}: key \"boundary_ratio\": {} is not a number in (0, 1) (the expert switch "
                      "as a fraction of the 1000 timesteps, e.g. 0.875)",
                      file.string(), ratio.dump()));
    index.boundary_ratio = ratio.get<double>();
  }
  return index;
}

std::optional<ModelFolder> find_model_folder(const std::string& path, const std::string& component,
                                             const std::string& stem) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return std::nullopt;
  if (auto found = component_in(path, stem)) return found;
  const auto index = read_pipeline_index(path);
  if (index && index->names(component)) return required_component(path, index, component, stem);
  if (component_problem(fs::path(path) / component, stem).empty())
    return required_component(path, index, component, stem);
  throw UsageError(fmt::format(
      "{}: a folder with no model in it: a diffusers {} folder holds config.json and {}.safetensors (or its "
      "shards' .safetensors.index.json), here or in {}/",
      path, component, stem, component));
}

std::optional<ModelFolder> find_transformer_folder(const std::string& path) {
  if (find_two_experts(path))
    throw UsageError(
        fmt::format("{}: holds two experts, transformer/ the high-noise one and transformer_2/ the "
                    "low-noise one: give one expert's folder ({}/transformer or {}/transformer_2) "
                    "where one model is read (wansample --weights takes both)",
                    path, path, path));
  return find_model_folder(path, "transformer", kTransformerStem);
}

std::optional<TwoExperts> find_two_experts(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return std::nullopt;
  const auto index = read_pipeline_index(path);
  const bool two = index ? index->names("transformer_2") : fs::is_directory(fs::path(path) / "transformer_2", error);
  if (!two) return std::nullopt;
  const auto high = required_component(path, index, "transformer", kTransformerStem);
  const auto low = required_component(path, index, "transformer_2", kTransformerStem);
  return TwoExperts{high.folder, low.folder, index ? index->boundary_ratio : std::nullopt};
}

bool is_diffusers_config(const std::string& json_text) {
  const auto doc = json::parse(json_text, nullptr, false);
  // The official release's config.json names its own class, WanModel (or
  // VaceWanModel), over Wan's keys: not a diffusers config.
  return doc.is_object() && doc.contains("_class_name") && doc["_class_name"] != "WanModel" &&
         doc["_class_name"] != "VaceWanModel";
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
  const bool vace = class_name == "WanVACETransformer3DModel";
  if (class_name != "WanTransformer3DModel" && !vace)
    throw UsageError(
        fmt::format("{}: _class_name \"{}\": not a WanTransformer3DModel or WanVACETransformer3DModel (the Wan DiT's "
                    "diffusers classes)",
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
  if (vace) {
    if (c.model_type != ModelType::T2V)
      throw UsageError(
          fmt::format("{}: a WanVACETransformer3DModel with image inputs: wantrain's VACE models are "
                      "text-to-video (Wan2.1-VACE)",
                      source));
    c.model_type = ModelType::VACE;
    if (!doc.contains("vace_layers") || !doc["vace_layers"].is_array())
      throw UsageError(fmt::format("{}: key \"vace_layers\": missing or not a list of block numbers", source));
    for (const auto& i : doc["vace_layers"]) {
      if (!i.is_number_integer())
        throw UsageError(fmt::format("{}: key \"vace_layers\": missing or not a list of block numbers", source));
      c.vace_layers.push_back(i.get<int64_t>());
    }
    c.vace_in_dim = integer("vace_in_channels");
  }
  validate(c, source);
  return c;
}

}  // namespace

}  // namespace wt::wan
