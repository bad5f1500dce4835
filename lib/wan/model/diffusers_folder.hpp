// Model folders as diffusers and transformers save them (save_pretrained):
// a component folder holds config.json beside its weights, one
// `<stem>.safetensors` or several with their `<stem>.safetensors.index.json`;
// a pipeline's root folder (model_index.json) holds one folder a component
// (transformer/, transformer_2/, vae/, text_encoder/, ...).
//
// A WanTransformer3DModel's config.json gives the WanConfig: the width is
// heads x head dim; the text is 512 tokens, as WanPipeline pads prompts
// (max_sequence_length); image_dim makes an i2v model, and with
// pos_embed_seq_len an flf2v one; in_channels of twice the out_channels plus
// 4 without image_dim is Wan2.2's i2v; 48 latent channels in and out (the
// Wan2.2 VAE's) is TI2V-5B's ti2v.
#pragma once

#include <optional>
#include <string>

#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct ModelFolder {
  std::string folder;   // the component's folder
  std::string config;   // its config.json
  std::string weights;  // its .safetensors, or the .safetensors.index.json of its shards
};

// `path` itself when it is a component folder with weights named
// `<stem>.safetensors[.index.json]`, else its `component`/ sub-folder when
// that is one; nullopt when `path` is not a directory. UsageError naming the
// folder when it is a directory that holds neither.
std::optional<ModelFolder> find_model_folder(const std::string& path, const std::string& component,
                                             const std::string& stem);

// The transformer of a diffusers folder (the component, or a pipeline root
// holding transformer/): stem diffusion_pytorch_model.
std::optional<ModelFolder> find_transformer_folder(const std::string& path);

// A WanTransformer3DModel config.json as a WanConfig; UsageError naming the
// file and the key for a missing or unsupported value.
WanConfig parse_diffusers_config(const std::string& json_text, const std::string& source);

// Whether `json_text` is a diffusers config (it names its _class_name).
bool is_diffusers_config(const std::string& json_text);

}  // namespace wt::wan
