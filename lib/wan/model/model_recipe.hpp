// ModelRecipe: how a Wan DiT is put together, as one value: its config, the
// dtype its blocks' Linears are held in, how its parameters start (drawn
// from a seed, from the generator as it stands, or not at all), the weights
// read over them, LoRA files merged into them, trained adapters added last,
// and how it computes attention. build_model is the one function that makes
// a model from a recipe: the training run (wan/run/wan_run.hpp), the sample
// ranks (wan/run/sample_group.hpp), wansample (wan/sample/sampling_pipeline.hpp),
// wanbench and `wantrain export` all build theirs with it, so that one
// recipe built twice is the same model.
//
// Where the model then lives (device, block swap, sequence split, train or
// eval) is the caller's: those differ between training and sampling.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/nn/attention_chunk.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

// How the parameters start, before any weights are read over them.
enum class FirstWeights {
  Seed,       // torch::manual_seed(seed), then Wan's init_weights: one seed, one model on every rank
  Generator,  // Wan's init_weights from the global generator as it stands (a run's second model)
  None,       // allocated, not drawn: every parameter comes from `weights`
};

// Weights read over the first ones, strictly (every parameter, by name and
// shape); but a VACE model's weights may be a text-to-video model's, every
// parameter but the VACE branch's, which then keeps its draw (not with
// FirstWeights::None), its projections zero.
struct ModelWeights {
  std::string path;         // safetensors file or index, .pth, diffusers folder, or a wantrain checkpoint
  bool prefer_ema = false;  // a checkpoint: its EMA weights where it has them (checkpoint_weights.hpp)
};

// A LoRA file merged into the weights (wansample --lora), at a scale.
struct LoraMerge {
  std::string path;
  double scale = 1.0;
};

struct ModelRecipe {
  WanConfig config;
  // The blocks' Linear weights: kFloat, kBFloat16 (a LoRA base, or a sampler
  // computing in bf16) or kFloat8_e4m3fn (a LoRA base, with scales).
  at::ScalarType linear_dtype = at::kFloat;
  FirstWeights first = FirstWeights::Seed;
  uint64_t seed = 0;  // with FirstWeights::Seed
  std::optional<ModelWeights> weights{};
  std::vector<LoraMerge> merged_loras{};  // in order, after the weights
  // Trained adapters, added last: the model is frozen, the adapters are its
  // only trainable parameters (lora.hpp).
  std::optional<LoraOptions> adapters{};
  // A VACE model's VACE branch alone trained, in full (--trainable vace
  // without LoRA): every parameter outside it frozen, as DiffSynth-Studio
  // trains VACE. Not with adapters.
  bool vace_branch_only = false;
  int64_t attention_chunk = nn::kFusedAttention;  // WanModel::set_attention_chunk
};

// What building read and did, for the caller's log and checkpoints.
struct BuiltModel {
  WanModel model{nullptr};
  std::string loaded;              // how the weights were read (one line); "" none read
  std::vector<int> merged_layers;  // per merged LoRA file, the layers it changed
  int64_t adapter_parameters = 0;  // with adapters
  // With adapters: the frozen base as held (held_weights_checksum); with
  // vace_branch_only: every parameter outside the branch (vace_base_checksum).
  std::string base_checksum;
};

struct BuildOptions {
  // `recipe.weights` already open (a teacher's tensors as loaded, or
  // wansample's sources, checked before any model is built): read from it
  // instead of opening the path again.
  const TensorSource* opened = nullptr;
  // How the weights go into the model; default load_weights, strict, whose
  // report is BuiltModel::loaded. wansample's sharded loading is its own.
  std::function<std::string(WanModelImpl& model, const TensorSource& source)> load;
};

// The model of `recipe`, on the CPU in the dtypes it names. UsageError (as
// load_weights, checkpoint_weights, merge_lora_file and add_lora give) when
// the weights do not fit.
BuiltModel build_model(const ModelRecipe& recipe, const BuildOptions& options = {});

// The checksum of a VACE model's frozen base, every parameter outside the
// VACE branch, as `model` holds it: what a run that trains the branch alone
// records, equal whether the base was read from a VACE model or from a
// text-to-video model's weights.
std::string vace_base_checksum(const WanConfig& config, const WanModelImpl& model);

}  // namespace wt::wan
