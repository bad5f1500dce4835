// A model written as diffusers saves a WanTransformer3DModel
// (save_pretrained), for wantrain export --format diffusers: OUT/transformer/
// with config.json and diffusion_pytorch_model.safetensors, or, past the
// shard size, the shards diffusion_pytorch_model-0000K-of-0000N.safetensors
// and their diffusion_pytorch_model.safetensors.index.json. diffusers'
// WanTransformer3DModel.from_pretrained(OUT, subfolder="transformer") loads
// it, and wantrain reads it back as a diffusers folder (diffusers_folder.hpp).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "wantrain/wan/model/model_config.hpp"

namespace torch::nn {
class Module;
}

namespace wt::wan {

// The WanTransformer3DModel config.json of `config`. UsageError naming what
// diffusers cannot express, found by reading the result back
// (parse_diffusers_config) and comparing: e.g. a text_len other than the
// 512 tokens WanPipeline pads prompts to.
std::string diffusers_config_json(const WanConfig& config);

struct DiffusersFolder {
  std::string folder;  // OUT/transformer (or the component given: transformer_2, A14B's low-noise expert)
  int shards = 1;
  double bytes = 0;  // the weights' bytes, all shards
};

// Writes `module`'s parameters (a WanModel of `config`) in `dtype` with
// diffusers' names; shards of at most `max_shard_bytes` each (a tensor
// larger than that gets a shard of its own). UsageError as
// diffusers_config_json, or naming a file that cannot be written.
DiffusersFolder save_diffusers_folder(const torch::nn::Module& module, const WanConfig& config, const std::string& out,
                                      at::ScalarType dtype, double max_shard_bytes,
                                      const std::string& component = "transformer");

}  // namespace wt::wan
