#include "wantrain/wan/model/lora.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>

#include "wantrain/nn/linear.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

// The Linear `name` (e.g. "self_attn.q") of `module`, or null.
nn::LinearImpl* linear_of(torch::nn::Module& module, const std::string& name) {
  const auto modules = module.named_modules("", /*include_self=*/false);
  const auto* found = modules.find(name);
  return found ? (*found)->as<nn::LinearImpl>() : nullptr;
}

bool is_image_embedding_target(const std::string& target) { return target.rfind("img_emb.", 0) == 0; }
// A VACE block's projections: before_proj (the first block's) and after_proj.
bool is_vace_projection(const std::string& target) { return target == "before_proj" || target == "after_proj"; }

}  // namespace

const std::vector<std::string>& lora_targets() {
  static const std::vector<std::string> targets = [] {
    auto all = block_linear_names();
    all.insert(all.end(), {"before_proj", "after_proj", "img_emb.proj.1", "img_emb.proj.3"});
    return all;
  }();
  return targets;
}

std::string lora_target_of(const std::string& name) {
  if (const auto layer = block_linear(name); !layer.empty()) return layer;
  if (name.rfind("vace_blocks.", 0) == 0)
    for (const char* target : {"before_proj", "after_proj"})
      if (name.find(std::string(".") + target + ".") != std::string::npos) return target;
  for (const char* target : {"img_emb.proj.1", "img_emb.proj.3"})
    if (name.rfind(std::string(target) + ".", 0) == 0) return target;
  return "";
}

void check_lora_options(const LoraOptions& options) {
  if (options.rank < 1) throw SettingError("lora_rank", fmt::format("must be at least 1, got {}", options.rank));
  if (!(options.alpha >= 0)) throw SettingError("lora_alpha", fmt::format("must be 0 or more, got {}", options.alpha));
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw SettingError("lora_dropout", fmt::format("must be in [0, 1), got {}", options.dropout));
  const auto& valid = lora_targets();
  for (size_t i = 0; i < options.targets.size(); ++i)
    if (std::find(options.targets.begin(), options.targets.begin() + i, options.targets[i]) !=
        options.targets.begin() + i)
      throw SettingError("lora_targets", fmt::format("'{}' is named twice", options.targets[i]));
  for (const auto& target : options.targets)
    if (std::find(valid.begin(), valid.end(), target) == valid.end())
      throw SettingError("lora_targets", fmt::format("'{}' is not a Linear layer of a Wan block, a VACE block or "
                                                     "the image embedding (valid: {})",
                                                     target, fmt::join(valid, ", ")));
}

int64_t add_lora(WanModelImpl& model, const LoraOptions& options) {
  check_lora_options(options);
  for (auto& parameter : model.parameters()) parameter.set_requires_grad(false);
  const double alpha = options.alpha > 0 ? options.alpha : double(options.rank);
  // "all": every target this model has (the image layers only where it has the image branch).
  const bool all = options.targets.empty();
  int64_t count = 0;
  auto adapt = [&](torch::nn::Module& owner, const std::string& name, const std::string& where) {
    auto* linear = linear_of(owner, name);
    if (!linear) {
      if (all) return;
      throw SettingError("lora_targets", fmt::format("'{}': this {} model has no such layer{}", name,
                                                     model_type_name(model.config().model_type), where));
    }
    linear->add_lora(options.rank, alpha, options.dropout);
    count += linear->lora_A.numel() + linear->lora_B.numel();
  };
  const auto& targets = all ? lora_targets() : options.targets;
  // Every block, a VACE model's VACE blocks too (the same Linears); or those alone.
  if (options.vace_only && !model.vace_blocks)
    throw SettingError("trainable", fmt::format("vace adapts the VACE blocks, and this {} model has none",
                                                model_type_name(model.config().model_type)));
  for (const auto& name : targets)
    if (is_vace_projection(name) && !all && !model.vace_blocks)
      adapt(model, name, " (the VACE projections are a VACE model's)");
  for (auto* block : model.all_blocks()) {
    const bool vace_block = dynamic_cast<VaceBlockImpl*>(block) != nullptr;
    if (options.vace_only && !vace_block) continue;
    for (const auto& name : targets) {
      if (is_image_embedding_target(name)) continue;
      // The projections where a VACE block has them (before_proj: the first).
      if (is_vace_projection(name)) {
        if (linear_of(*block, name)) adapt(*block, name, "");
        continue;
      }
      adapt(*block, name, " (the image branch is Wan2.1 I2V/FLF2V's)");
    }
  }
  for (const auto& name : targets)
    if (is_image_embedding_target(name) && !options.vace_only) {
      if (model.img_emb)
        adapt(*model.img_emb, name.substr(std::string("img_emb.").size()), "");
      else if (!all)
        adapt(model, name, " (the image embedding is Wan2.1 I2V/FLF2V's)");
    }
  return count;
}

std::string describe_lora(const LoraOptions& options) {
  const double alpha = options.alpha > 0 ? options.alpha : double(options.rank);
  std::string text =
      fmt::format("rank {}, alpha {:g} (scale {:g}), targets {}", options.rank, alpha, alpha / double(options.rank),
                  options.targets.empty() ? std::string("all") : fmt::format("{}", fmt::join(options.targets, ",")));
  if (options.dropout > 0) text += fmt::format(", dropout {:g}", options.dropout);
  if (options.vace_only) text += ", VACE blocks only";
  return text;
}

void write_lora_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& adapters,
                     const LoraOptions& options, const std::string& base, LoraNames names, at::ScalarType dtype,
                     const std::map<std::string, std::string>& metadata) {
  const double alpha = options.alpha > 0 ? options.alpha : double(options.rank);
  // The targets adapted, in lora_targets() order: "all" of a t2v model is
  // the ten block Linears, named as they always were.
  std::vector<std::string> adapted;
  for (const auto& target : options.targets.empty() ? lora_targets() : options.targets)
    if (std::any_of(adapters.begin(), adapters.end(), [&](const auto& adapter) {
          return lora_target_of(adapter.first.substr(0, adapter.first.rfind(".lora_")) + ".weight") == target;
        }))
      adapted.push_back(target);
  io::NamedTensors out;
  for (const auto& [name, tensor] : adapters) {
    const auto at = name.rfind(".lora_");
    if (at == std::string::npos) throw Error(fmt::format("{} is not a LoRA adapter", name));
    const std::string official = name.substr(0, at);
    const bool up = name.compare(at, std::string::npos, ".lora_B") == 0;
    if (names == LoraNames::Diffusers) {
      // diffusers applies transformer.* adapters at alpha = r: the scale
      // alpha / r is folded into B, and no alpha is written.
      const std::string renamed = diffusers_name(official + ".weight");
      const std::string layer = "transformer." + renamed.substr(0, renamed.size() - 7);
      out.emplace_back(layer + name.substr(at) + ".weight", up ? tensor * (alpha / double(options.rank)) : tensor);
      continue;
    }
    const std::string layer = "diffusion_model." + official;
    out.emplace_back(layer + name.substr(at) + ".weight", tensor);
    if (up) out.emplace_back(layer + ".alpha", torch::tensor(float(alpha)));
  }
  auto all = metadata;
  for (auto& [key, value] :
       std::map<std::string, std::string>{{"format", "pt"},
                                          {"lora_rank", std::to_string(options.rank)},
                                          {"lora_alpha", fmt::format("{:g}", alpha)},
                                          {"lora_targets", fmt::format("{}", fmt::join(adapted, ","))},
                                          {"base_checksum", base}})
    all[key] = value;
  io::write_safetensors(path, out, dtype, all);
}

void merge_lora(WanModelImpl& model) {
  for (auto& module : model.modules(/*include_self=*/false))
    if (auto* linear = module->as<nn::LinearImpl>()) linear->merge_lora();
}

void dequantize_fp8_linears(WanModelImpl& model, at::ScalarType dtype) {
  for (auto& module : model.modules(/*include_self=*/false))
    if (auto* linear = module->as<nn::LinearImpl>()) linear->dequantize_fp8(dtype);
}

}  // namespace wt::wan
