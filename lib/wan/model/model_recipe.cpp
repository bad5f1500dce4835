#include "wantrain/wan/model/model_recipe.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/wan/model/lora_file.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

// Whether `source` holds every parameter of a VACE `config` but its VACE
// branch's (vace_blocks, vace_patch_embedding), and nothing else: a
// text-to-video model's weights under a VACE model.
bool lacks_only_the_vace_branch(const WanConfig& config, const TensorSource& source) {
  if (!config.vace()) return false;
  const auto report = match_weights(parameter_shapes(config), source);
  return !report.missing.empty() && report.unexpected.empty() && report.mismatched.empty() &&
         std::all_of(report.missing.begin(), report.missing.end(), in_vace_branch);
}

}  // namespace

BuiltModel build_model(const ModelRecipe& recipe, const BuildOptions& options) {
  if (recipe.first == FirstWeights::Seed) torch::manual_seed(recipe.seed);
  BuiltModel built;
  built.model = WanModel(recipe.config, recipe.linear_dtype,
                         recipe.first == FirstWeights::None ? WanInit::Empty : WanInit::Random);
  auto& model = *built.model;
  if (recipe.weights) {
    // A checkpoint is read one tensor at a time, converted into the model's
    // precision: a bf16 base never exists in fp32.
    std::optional<TensorSource> own;
    if (!options.opened)
      own = ckpt::is_checkpoint_file(recipe.weights->path)
                ? checkpoint_weights(recipe.weights->path, recipe.weights->prefer_ema).source
                : open_weights(recipe.weights->path);
    const TensorSource& source = options.opened ? *options.opened : *own;
    if (!options.load && recipe.first != FirstWeights::None && lacks_only_the_vace_branch(recipe.config, source)) {
      // The VACE paper's start: a text-to-video base under a fresh branch,
      // whose zero projections add nothing until it is trained.
      const auto report = load_weights(model, source, LoadMode::Lenient);
      built.loaded = fmt::format(
          "{} tensors of a text-to-video model loaded; the VACE branch's {} are fresh (drawn, its projections zero: "
          "the model samples as the base until the branch is trained)",
          report.loaded.size(), report.missing.size());
    } else {
      built.loaded =
          options.load ? options.load(model, source) : load_weights(model, source, LoadMode::Strict).summary();
    }
  }
  for (const auto& lora : recipe.merged_loras)
    built.merged_layers.push_back(merge_lora_file(model, lora.path, lora.scale));
  if (recipe.adapters) {
    built.base_checksum = held_weights_checksum(recipe.config, model);
    built.adapter_parameters = add_lora(model, *recipe.adapters);
  }
  if (recipe.vace_branch_only) {
    if (!recipe.config.vace() || recipe.adapters)
      throw Error("build_model: vace_branch_only needs a VACE config and no adapters");
    for (auto& item : model.named_parameters()) item.value().set_requires_grad(in_vace_branch(item.key()));
    built.base_checksum = vace_base_checksum(recipe.config, model);
  }
  model.set_attention_chunk(recipe.attention_chunk);
  return built;
}

std::string vace_base_checksum(const WanConfig& config, const WanModelImpl& model) {
  return held_weights_checksum(config, model, [](const std::string& name) { return !in_vace_branch(name); });
}

}  // namespace wt::wan
