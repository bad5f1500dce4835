#include "wantrain/wan/model/model_recipe.hpp"

#include <torch/torch.h>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/wan/model/checkpoint_weights.hpp"
#include "wantrain/wan/model/lora_file.hpp"

namespace wt::wan {

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
    built.loaded = options.load ? options.load(model, source) : load_weights(model, source, LoadMode::Strict).summary();
  }
  for (const auto& lora : recipe.merged_loras)
    built.merged_layers.push_back(merge_lora_file(model, lora.path, lora.scale));
  if (recipe.adapters) {
    built.base_checksum = held_weights_checksum(recipe.config, model);
    built.adapter_parameters = add_lora(model, *recipe.adapters);
  }
  model.set_attention_chunk(recipe.attention_chunk);
  return built;
}

}  // namespace wt::wan
