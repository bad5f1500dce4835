// A small CLIP image tower's files for the tests: what the released file
// holds for a tower of a config (random, in the official names), and the
// config as clip_reference.py reads it.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "wantrain/io/safetensors.hpp"
#include "wantrain/wan/encoders/clip_vision.hpp"

namespace wt::testing {

inline bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// What the released file holds for a tower of `config`, in a state dict's
// order: every visual.* tensor (the last block, post_norm and head too), a
// text-tower tensor and log_scale. Drawn so that every part matters and
// activations stay of order 1: LayerNorm gains around 1, small biases,
// matrices at unit gain (so that attention scores spread by about 1 and
// the softmax is far from uniform), the class token and position embedding
// as large as the patch tokens.
inline wt::io::NamedTensors released_clip_state_dict(const wt::wan::ClipVisionConfig& config, uint64_t seed) {
  auto with_last = config;
  ++with_last.num_layers;  // holds blocks 0 .. num_layers - 1: the last one included
  wt::wan::ClipVision tower(with_last);
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  wt::io::NamedTensors weights;
  for (auto& item : tower->named_parameters()) {
    auto& p = item.value();
    const bool norm = item.key().find("norm") != std::string::npos;
    if (norm && ends_with(item.key(), ".weight"))
      p.copy_(1 + 0.3 * torch::randn_like(p));
    else if (ends_with(item.key(), ".bias"))
      p.copy_(0.1 * torch::randn_like(p));
    else if (item.key() == "cls_embedding" || item.key() == "pos_embedding")
      p.copy_(torch::randn_like(p));
    else
      p.copy_(torch::randn_like(p) / std::sqrt(double(p.numel() / p.size(0))));
    weights.emplace_back("visual." + item.key(), p.clone());
  }
  weights.emplace_back("visual.post_norm.weight", 1 + 0.3 * torch::randn({config.dim}));
  weights.emplace_back("visual.post_norm.bias", 0.1 * torch::randn({config.dim}));
  weights.emplace_back("visual.head", torch::randn({config.dim, 24}));
  weights.emplace_back("textual.token_embedding.weight", torch::randn({30, 16}));
  weights.emplace_back("log_scale", torch::full({}, std::log(1 / 0.07)));
  return weights;
}

inline std::string clip_config_json(const wt::wan::ClipVisionConfig& c) {
  return nlohmann::json{{"image_size", c.image_size}, {"patch_size", c.patch_size}, {"dim", c.dim},
                        {"mlp_ratio", c.mlp_ratio},   {"num_heads", c.num_heads},   {"num_layers", c.num_layers}}
      .dump();
}

}  // namespace wt::testing
