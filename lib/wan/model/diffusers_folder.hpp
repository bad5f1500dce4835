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

#include <map>
#include <optional>
#include <string>

#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct ModelFolder {
  std::string folder;   // the component's folder
  std::string config;   // its config.json
  std::string weights;  // its .safetensors, or the .safetensors.index.json of its shards
};

// A pipeline root's model_index.json, as save_pretrained writes it: the
// truth about which components the folder holds.
struct PipelineIndex {
  std::string file;                               // ROOT/model_index.json
  std::map<std::string, std::string> components;  // each component it names -> its class ("[null, null]": none)
  std::optional<double> boundary_ratio;           // Wan2.2 A14B's expert switch, in (0, 1)
  bool names(const std::string& component) const { return components.count(component) > 0; }
};
// nullopt when `root` has no model_index.json; UsageError naming the file
// and key for bad JSON, a component that is not [library, class], or a
// boundary_ratio outside (0, 1).
std::optional<PipelineIndex> read_pipeline_index(const std::string& root);

// `path` itself when it is a component folder with weights named
// `<stem>.safetensors[.index.json]`, else its `component`/ sub-folder when
// that is one; nullopt when `path` is not a directory. UsageError naming the
// folder when it is a directory that holds neither, naming the component
// when model_index.json names it and its folder is missing or incomplete,
// and naming the file when one the folder holds resolves outside it
// (docs/model.md, "Files a folder names").
std::optional<ModelFolder> find_model_folder(const std::string& path, const std::string& component,
                                             const std::string& stem);

// The transformer of a diffusers folder (the component, or a pipeline root
// holding transformer/): stem diffusion_pytorch_model. UsageError for a root
// that holds two experts: a program that takes one model never runs one
// expert of a pair (load_model_config reads their shared config).
std::optional<ModelFolder> find_transformer_folder(const std::string& path);

// A Wan2.2 A14B pipeline folder: transformer/ is the high-noise expert and
// transformer_2/ the low-noise one (WanPipeline runs `transformer` at
// timesteps >= boundary_ratio x 1000), and model_index.json's
// boundary_ratio, when it has one. Two experts when model_index.json names
// transformer_2 (or, in a root without one, when transformer_2/ exists);
// nullopt when not; UsageError naming what is missing when so.
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
