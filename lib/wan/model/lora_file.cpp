#include "wantrain/wan/model/lora_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>

#include "wantrain/nn/linear.hpp"
#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/model/weight_names.hpp"
#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class Part { Down, Up, Alpha };

// The model's Linear layers by official name, and by kohya's flattened name.
struct Layers {
  std::map<std::string, torch::nn::Module*> official;
  std::map<std::string, std::string> kohya;  // "blocks_0_self_attn_q" -> "blocks.0.self_attn.q"
};

Layers layers_of(WanModelImpl& model) {
  Layers out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* module = item.value().get();
    if (!module->as<nn::LinearImpl>() && !module->as<torch::nn::LinearImpl>()) continue;
    out.official[item.key()] = module;
    std::string flat = item.key();
    std::replace(flat.begin(), flat.end(), '.', '_');
    out.kohya[flat] = item.key();
  }
  return out;
}

at::Tensor weight_of(torch::nn::Module* module) {
  if (auto* linear = module->as<nn::LinearImpl>()) return linear->weight;
  return module->as<torch::nn::LinearImpl>()->weight;
}

}  // namespace

std::map<std::string, LoraLayer> read_lora_file(const std::string& path, WanModelImpl& model) {
  const auto file = io::SafetensorsFile::open(path);
  const Layers layers = layers_of(model);
  auto fail = [&](const std::string& what) { return UsageError(fmt::format("LoRA {}: {}", path, what)); };
  std::map<std::string, LoraLayer> out;
  for (const auto& entry : file.entries()) {
    std::string name = entry.name;
    Part part;
    if (ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_down.weight")) {
      part = Part::Down;
    } else if (ends_with(name, ".lora_B.weight") || ends_with(name, ".lora_up.weight")) {
      part = Part::Up;
    } else if (ends_with(name, ".alpha")) {
      part = Part::Alpha;
    } else {
      throw fail(
          fmt::format("'{}' is not a LoRA tensor (.lora_A/.lora_B/.lora_down/.lora_up .weight, or .alpha)", name));
    }
    const std::string layer_key = name.substr(0, name.rfind(part == Part::Alpha ? ".alpha" : ".lora_"));
    // The official name of the adapted layer, whichever layout.
    std::string layer;
    if (starts_with(layer_key, "lora_unet_")) {
      const auto it = layers.kohya.find(layer_key.substr(10));
      if (it != layers.kohya.end()) layer = it->second;
    } else {
      std::string key = layer_key;
      for (const char* prefix : {"diffusion_model.", "transformer."})
        if (starts_with(key, prefix)) key = key.substr(std::string(prefix).size());
      const std::string official = official_name(key + ".weight");
      layer = official.substr(0, official.size() - 7);
    }
    if (layer.empty() || !layers.official.count(layer))
      throw fail(fmt::format("'{}' adapts no Linear layer of this model", name));
    auto& slot = out[layer];
    const auto tensor = file.read(entry).to(torch::kFloat32);
    if (part == Part::Alpha) {
      if (tensor.numel() != 1) throw fail(fmt::format("'{}' is not a scalar", name));
      slot.alpha = tensor.item<double>();
    } else {
      (part == Part::Down ? slot.down : slot.up) = tensor;
    }
  }
  for (auto& [layer, adapter] : out) {
    if (!adapter.down.defined() || !adapter.up.defined())
      throw fail(fmt::format("layer {} has only one of its two LoRA matrices", layer));
    const auto weight = weight_of(layers.official.at(layer));
    if (adapter.down.dim() != 2 || adapter.up.dim() != 2 || adapter.down.size(0) < 1)
      throw fail(fmt::format("layer {}: adapters [{}] and [{}] are not matrices of rank 1 or more", layer,
                             fmt::join(adapter.down.sizes(), ", "), fmt::join(adapter.up.sizes(), ", ")));
    const int64_t r = adapter.down.size(0);
    if (adapter.up.size(1) != r || adapter.down.size(1) != weight.size(1) || adapter.up.size(0) != weight.size(0))
      throw fail(
          fmt::format("layer {}: adapters [{}] and [{}] do not fit its weight [{}, {}] (expected [r, {}] and "
                      "[{}, r])",
                      layer, fmt::join(adapter.down.sizes(), ", "), fmt::join(adapter.up.sizes(), ", "), weight.size(0),
                      weight.size(1), weight.size(1), weight.size(0)));
    if (adapter.alpha == 0) adapter.alpha = double(r);
  }
  if (out.empty()) throw fail("holds no LoRA adapters");
  return out;
}

int merge_lora_file(WanModelImpl& model, const std::string& path, double scale) {
  const auto adapters = read_lora_file(path, model);
  const Layers layers = layers_of(model);
  torch::NoGradGuard no_grad;
  for (const auto& [layer, adapter] : adapters) {
    auto* module = layers.official.at(layer);
    const double factor = scale * adapter.alpha / double(adapter.down.size(0));
    const auto delta = torch::matmul(adapter.up, adapter.down) * factor;
    if (auto* linear = module->as<nn::LinearImpl>()) {
      linear->add_to_weight(delta);  // in fp32, rounded once: into bf16, or quantised into fp8
      continue;
    }
    auto weight = weight_of(module);
    weight.copy_((weight.to(torch::kFloat32) + delta.to(weight.device())).to(weight.scalar_type()));
  }
  return int(adapters.size());
}

}  // namespace wt::wan
