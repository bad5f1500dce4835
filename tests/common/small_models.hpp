// Small WanModels for unit tests of the model's parts (LoRA, recompute):
// Wan's shapes at a width a test runs in milliseconds.
#pragma once

#include <torch/torch.h>

#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"

namespace wt::testing {

// dim 32, 2 heads, FFN 64, text [8, 16], latents of 4 channels.
inline wan::WanConfig small_wan_config(int64_t layers = 2) {
  wan::WanConfig c;
  c.dim = 32;
  c.ffn_dim = 64;
  c.num_heads = 2;
  c.num_layers = layers;
  c.freq_dim = 32;
  c.text_dim = 16;
  c.text_len = 8;
  c.patch_size = {1, 2, 2};
  c.in_dim = 4;
  c.out_dim = 4;
  return c;
}

// The model seed 7 gives, with LoRA adapters when lora.rank > 0. Wan zeroes
// the output head; here it is drawn, so that every block reaches the output.
inline wan::WanModel seeded_small_model(const wan::WanConfig& config, const wan::LoraOptions& lora = {},
                                        at::ScalarType base_dtype = at::kFloat) {
  torch::manual_seed(7);
  wan::WanModel model(config, base_dtype);
  {
    torch::NoGradGuard no_grad;
    model->head->head->weight.normal_(0, 0.02);
  }
  if (lora.rank > 0) wan::add_lora(*model, lora);
  return model;
}

}  // namespace wt::testing
