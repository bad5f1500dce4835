// Reading LoRA files for a WanModel, in the three layouts the Wan ecosystem
// writes, and folding them into the model's weights (wansample --lora):
//   wantrain/ComfyUI  diffusion_model.blocks.0.self_attn.q.lora_A.weight [r, in],
//                     ....lora_B.weight [out, r], ....alpha (optional)
//   diffusers         transformer.blocks.0.attn1.to_q.lora_A.weight, ...
//   kohya (musubi)    lora_unet_blocks_0_self_attn_q.lora_down.weight [r, in],
//                     ....lora_up.weight [out, r], ....alpha
// The prefix may also be absent. A missing alpha means alpha = rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace wt::wan {

class WanModelImpl;

struct LoraLayer {
  at::Tensor down, up;  // A [r, in], B [out, r], fp32
  double alpha = 0;
};

// The adapters of `path` by the official name of the Linear layer they
// adapt ("blocks.0.self_attn.q"), for a model whose Linear layers are
// `model`'s. UsageError naming the file and the first name or shape that
// does not fit the model.
std::map<std::string, LoraLayer> read_lora_file(const std::string& path, WanModelImpl& model);

// weight += scale * alpha / r * B A for every adapter of `path`; returns the
// number of layers changed.
int merge_lora_file(WanModelImpl& model, const std::string& path, double scale);

}  // namespace wt::wan
