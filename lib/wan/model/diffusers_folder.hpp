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

// A Wan2.2 A14B pipeline folder: transformer/ is the high-noise expert and
// transformer_2/ the low-noise one (WanPipeline runs `transformer` at
// timesteps >= boundary_ratio x 1000), and model_index.json's
// boundary_ratio, when it has one. nullopt when `path` has no
// transformer_2/; UsageError naming what is missing when it has.
struct TwoExperts {
  std::string high_noise, low_noise;  // the component folders
  std::optional<double> boundary_ratio;
};
std::optional<TwoExperts> find_two_experts(const std::string& path);

// A WanTransformer3DModel config.json as a WanConfig; UsageError naming the
// file and the key for a missing or unsupported value.
WanConfig parse_diffusers_config(const std::string& json_text, const std::string& source);

// Whether `json_text` is a diffusers config: it names its _class_name, and
// not the official release's WanModel (whose config.json holds Wan's keys).
bool is_diffusers_config(const std::string& json_text);

}  // namespace wt::wan
