// LoRA on WanModel: low-rank adapters on the blocks' Linear layers, the
// rest of the model frozen (docs/lora.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace wt::wan {

class WanModelImpl;

struct LoraOptions {
  int64_t rank = 0;    // 0: no LoRA
  double alpha = 0;    // the adapter's output is scaled by alpha / rank; 0 means alpha = rank
  double dropout = 0;  // on the adapter's input, while training
  // Each block's Linear layers that get an adapter, by their official
  // names within the block (lora_targets()); empty: all of them.
  std::vector<std::string> targets;
  // A VACE model's VACE blocks alone (the base frozen without adapters,
  // as DiffSynth-Studio trains VACE); false: every block.
  bool vace_only = false;
};

// Every Linear layer LoRA can adapt: those of a Wan block, by official name
// within the block (self_attn.{q,k,v,o}, cross_attn.{q,k,v,o}, ffn.0,
// ffn.2, and the image branch's cross_attn.{k_img,v_img}), a VACE block's
// projections (before_proj of the first, after_proj of each: zero in a
// fresh branch, so without them a LoRA on a fresh branch could not learn),
// then the image embedding's img_emb.proj.1 and img_emb.proj.3 (Wan2.1
// I2V/FLF2V).
const std::vector<std::string>& lora_targets();
// The target a parameter belongs to ("blocks.3.self_attn.q.weight" ->
// "self_attn.q", "img_emb.proj.1.bias" -> "img_emb.proj.1"), or "".
std::string lora_target_of(const std::string& official_name);

// Checks `options` (a positive rank, alpha >= 0, dropout in [0, 1), known
// targets); UsageError naming the setting (lora_rank, lora_alpha,
// lora_dropout, lora_targets) otherwise.
void check_lora_options(const LoraOptions& options);

// Freezes every parameter of `model` (requires_grad false) and adds an
// adapter to each target Linear (of every block): "all" targets those this
// model has; a named target it lacks is a SettingError. Afterwards the adapters are
// the model's only trainable parameters, and its output is unchanged until
// they are trained. Returns the number of adapter parameters.
int64_t add_lora(WanModelImpl& model, const LoraOptions& options);

// One line: "rank 4, alpha 4 (scale 1), targets self_attn.q,ffn.0" (or
// "targets all"), dropout when set.
std::string describe_lora(const LoraOptions& options);

enum class LoraNames {
  Official,   // diffusion_model.blocks.0.self_attn.q.lora_A.weight: ComfyUI's layout
  Diffusers,  // transformer.blocks.0.attn1.to_q.lora_A.weight: diffusers' Wan LoRA loader
};

// The adapters of `adapters` (named as the model names them:
// "blocks.0.self_attn.q.lora_A", ...) as a LoRA file: per layer
// "<prefix><layer>.lora_A.weight" [r, in], "....lora_B.weight" [out, r] and a
// "....alpha" scalar, in `dtype`, with __metadata__ (rank, alpha, targets
// and `base`, the base's checksum; and `metadata`, e.g. a few-step student's
// sampler).
void write_lora_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& adapters,
                     const LoraOptions& options, const std::string& base, LoraNames names = LoraNames::Official,
                     at::ScalarType dtype = at::kFloat, const std::map<std::string, std::string>& metadata = {});

// Folds every adapter into its base weight (weight += alpha/rank * B A) and
// removes it: the model's parameters are the base's names again.
void merge_lora(WanModelImpl& model);
// Every Linear held in fp8 is held in `dtype` instead, as its dequantised
// values (an fp8 base's adapters are merged into these).
void dequantize_fp8_linears(WanModelImpl& model, at::ScalarType dtype);

}  // namespace wt::wan
