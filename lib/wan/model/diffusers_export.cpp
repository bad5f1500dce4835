#include "wantrain/wan/model/diffusers_export.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/weight_names.hpp"

namespace wt::wan {

namespace {
using json = nlohmann::json;
}  // namespace

std::string diffusers_config_json(const WanConfig& c) {
  if (c.ref_conv)
    throw UsageError(
        "this model has VideoX-Fun's ref_conv (a Fun-Control V1.1 model), which diffusers' WanTransformer3DModel has "
        "not: export it in the released layout (safetensors)");
  json doc = {{"_class_name", c.vace() ? "WanVACETransformer3DModel" : "WanTransformer3DModel"},
              {"_diffusers_version", "0.42.1"},
              {"patch_size", c.patch_size},
              {"num_attention_heads", c.num_heads},
              {"attention_head_dim", c.head_dim()},
              {"in_channels", c.in_dim},
              {"out_channels", c.out_dim},
              {"text_dim", c.text_dim},
              {"freq_dim", c.freq_dim},
              {"ffn_dim", c.ffn_dim},
              {"num_layers", c.num_layers},
              {"cross_attn_norm", c.cross_attn_norm},
              {"qk_norm", c.qk_norm ? json("rms_norm_across_heads") : json(nullptr)},
              {"eps", c.eps},
              {"image_dim", c.image_branch() ? json(c.image_dim) : json(nullptr)},
              {"added_kv_proj_dim", c.image_branch() ? json(c.dim) : json(nullptr)},
              {"rope_max_seq_len", 1024},
              {"pos_embed_seq_len", c.model_type == ModelType::FLF2V ? json(2 * c.image_tokens) : json(nullptr)}};
  if (c.vace()) {
    doc["vace_layers"] = c.vace_layers;
    doc["vace_in_channels"] = c.vace_in_dim;
  }
  const std::string text = doc.dump(2) + "\n";
  // What diffusers' config says must read back as this model.
  if (const auto lost = first_difference(parse_diffusers_config(text, "diffusers config.json"), c); !lost.empty())
    throw UsageError(fmt::format(
        "this model cannot be a diffusers WanTransformer3DModel as it is: read back from diffusers' config it "
        "would differ in {} (diffusers fixes text_len at 512 tokens, and tells i2v and ti2v models by their "
        "channels)",
        lost));
  return text;
}

DiffusersFolder save_diffusers_folder(const torch::nn::Module& module, const WanConfig& config, const std::string& out,
                                      at::ScalarType dtype, double max_shard_bytes, const std::string& component) {
  const std::string config_text = diffusers_config_json(config);  // refused before anything is written
  DiffusersFolder result;
  result.folder = out + "/" + component;
  std::error_code error;
  std::filesystem::create_directories(result.folder, error);
  if (error) throw UsageError(fmt::format("{}: cannot create the folder: {}", result.folder, error.message()));
  // Shards in the module's order, each up to max_shard_bytes.
  std::vector<io::NamedTensors> shards(1);
  double in_shard = 0;
  const double element = double(c10::elementSize(dtype));
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const double bytes = double(item.value().numel()) * element;
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(diffusers_name(item.key()), item.value());
    in_shard += bytes;
    result.bytes += bytes;
  }
  result.shards = int(shards.size());
  const std::string stem = result.folder + "/diffusion_pytorch_model";
  if (shards.size() == 1) {
    io::write_safetensors(stem + ".safetensors", shards[0], dtype);
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name =
          fmt::format("diffusion_pytorch_model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      io::write_safetensors(result.folder + "/" + name, shards[i], dtype);
      for (const auto& [tensor, value] : shards[i]) weight_map[tensor] = name;
    }
    const json index = {{"metadata", {{"total_size", int64_t(result.bytes)}}}, {"weight_map", weight_map}};
    write_file_durably(stem + ".safetensors.index.json", index.dump(2) + "\n");
  }
  write_file_durably(result.folder + "/config.json", config_text);
  return result;
}

}  // namespace wt::wan
