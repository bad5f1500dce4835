// WanConfig: the hyper-parameters of a WanModel, read from a JSON file with
// Wan's own keys (data/configs/*.json), and the model's parameter names and
// shapes derived from them without allocating anything.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wt::wan {

// Wan's `model_type`: what the model is conditioned on besides the text.
//   t2v    text only (in_dim latent channels)
//   i2v    a first frame: the condition y (4 mask channels + the latents of
//          [first frame, zeros...]) is concatenated to the noisy latents
//          (in_dim = 2 out_dim + 4), and with image_dim > 0 (Wan2.1) the
//          picture's CLIP features enter every cross-attention; with
//          in_dim = 3 out_dim, VideoX-Fun's Wan2.1-Fun-Control: y holds a
//          control video's latents and a start frame's (fun_control());
//          with in_dim = 3 out_dim + 4, Wan2.2-Fun's: a control video's
//          latents, then an i2v condition (mask and latents) of the start
//          frame (fun_control_with_mask()); on the Wan2.2 VAE's latents
//          (48 channels), Wan2.2-Fun-5B-Control, which also holds the
//          start's latent frame as TI2V does (holds_start_frame(); its
//          config may say ti2v: read as i2v)
//   flf2v  first and last frame: y as i2v with the last frame too, CLIP
//          features of both pictures with a learnt position embedding
//   ti2v   Wan2.2's TI2V-5B, built as t2v here
//   vace   Wan2.1-VACE: t2v plus vace_blocks that read the VACE context
//          (vace_in_dim channels beside the latents) and whose hints are
//          added after the base blocks at vace_layers (vace_model.py)
enum class ModelType { T2V, I2V, FLF2V, TI2V, VACE };
const char* model_type_name(ModelType type);

struct WanConfig {
  int64_t dim = 0;        // model width
  int64_t ffn_dim = 0;    // hidden width of each block's feed-forward
  int64_t num_heads = 0;  // attention heads; dim / num_heads must be even (RoPE pairs)
  int64_t num_layers = 0;
  int64_t freq_dim = 0;                 // width of the sinusoidal time embedding (Wan: 256)
  int64_t text_dim = 0;                 // text encoder width (umT5: 4096)
  int64_t text_len = 0;                 // context positions seen by cross-attention (Wan: 512)
  std::array<int64_t, 3> patch_size{};  // (frames, height, width)
  int64_t in_dim = 0;                   // latent channels in
  int64_t out_dim = 0;                  // latent channels out
  double eps = 1e-6;                    // LayerNorm and RMSNorm epsilon
  bool qk_norm = true;                  // RMSNorm on q and k (norm_q, norm_k parameters)
  bool cross_attn_norm = true;          // affine LayerNorm norm3 before cross-attention
  ModelType model_type = ModelType::T2V;
  int64_t image_dim = 0;       // CLIP feature width of the image branch (Wan2.1 I2V/FLF2V: 1280); 0: none
  int64_t image_tokens = 257;  // CLIP tokens per picture (ViT-H/14 at 224 px): the size of flf2v's emb_pos
  // vace only: the base blocks after which the VACE blocks' hints are added,
  // ascending from 0 (the official default: every second block), one VACE
  // block each; and the VACE context's channels (the releases: 96).
  std::vector<int64_t> vace_layers;
  int64_t vace_in_dim = 0;
  // Wan2.1-Fun-Control V1.1 (VideoX-Fun's add_ref_conv): ref_conv, a 2-D
  // patch embedding of a reference picture's latent frame, whose tokens are
  // put before the video's (frame position 0) and cut off before the head.
  bool ref_conv = false;

  int64_t head_dim() const { return dim / num_heads; }
  // Whether the model reads the image condition y concatenated to its input.
  bool image_conditioned() const { return model_type == ModelType::I2V || model_type == ModelType::FLF2V; }
  // Pictures per sample in the condition: 1 (i2v), 2 (flf2v), 0 (otherwise).
  int64_t condition_images() const { return model_type == ModelType::FLF2V ? 2 : model_type == ModelType::I2V ? 1 : 0; }
  // Whether cross-attention also attends over CLIP features (Wan2.1's image branch).
  bool image_branch() const { return image_conditioned() && image_dim > 0; }
  // Channels of y: the latents' plus 4 mask channels (Fun-Control: the
  // control's latents before them, or instead of the mask).
  int64_t condition_channels() const { return image_conditioned() ? in_dim - out_dim : 0; }
  bool vace() const { return model_type == ModelType::VACE; }
  // VideoX-Fun's Fun-Control layouts, i2v models whose y begins with a
  // control video's latents (out_dim channels): Wan2.1-Fun-Control's y is
  // [control latents, start frame latents] (in_dim 3 out_dim), Wan2.2-Fun's
  // [control latents, mask (4), latents of the start frame and zeros]
  // (in_dim 3 out_dim + 4, fun_control_with_mask()).
  // (At out_dim 4, 3 out_dim is an i2v model's 2 out_dim + 4: that is i2v.)
  bool fun_control() const {
    return model_type == ModelType::I2V && out_dim > 0 && in_dim != 2 * out_dim + 4 &&
           (in_dim == 3 * out_dim || in_dim == 3 * out_dim + 4);
  }
  bool fun_control_with_mask() const { return fun_control() && in_dim == 3 * out_dim + 4; }
  // Wan2.2-Fun-5B-Control: a fun_control_with_mask() model on the Wan2.2
  // VAE's latents (pipeline_wan2_2_fun_control.py's spatial_compression_ratio
  // >= 16 case, the VAE known here by its 48 channels). Where y holds a start
  // frame (fun_control_start.hpp), the start's latents replace latent frame
  // 0 of x and its tokens see timestep 0 (TI2V's first-frame condition), in
  // sampling and in training.
  bool holds_start_frame() const { return fun_control_with_mask() && out_dim == kWan22LatentChannels; }
  static constexpr int64_t kWan22LatentChannels = 48;
  // A Fun-Control V1.1 model (ref_conv, y without a mask) also trains on
  // data whose y holds another frame of the clip as a reference after the
  // start (wandata encode --condition fun-control-ref; reference_frame.hpp):
  // that y's channels, 3 out_dim; 0 for any other model.
  int64_t reference_y_channels() const {
    return fun_control() && !fun_control_with_mask() && ref_conv ? 3 * out_dim : 0;
  }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
};

// Reads and validates a config file. UsageError naming the file and the key
// for a missing key, an unknown key, a value of the wrong type or range.
// A diffusers WanTransformer3DModel config.json, or a diffusers folder (the
// transformer's, or a pipeline's root) is read as diffusers_folder.hpp says.
WanConfig load_model_config(const std::string& path);
// "num_layers: 30 vs 2": the first key whose values differ; "" when equal.
std::string first_difference(const WanConfig& a, const WanConfig& b);
// The same from JSON text; `source` names it in errors.
WanConfig parse_model_config(const std::string& json_text, const std::string& source);
// The config as JSON with Wan's keys (what checkpoints store).
std::string to_json(const WanConfig& config);
// Range checks shared by the parser and code that builds configs itself.
void validate(const WanConfig& config, const std::string& source);

using ParameterShape = std::pair<std::string, std::vector<int64_t>>;
// Every parameter of WanModel(config) by its official Wan name, in the
// model's registration order.
std::vector<ParameterShape> parameter_shapes(const WanConfig& config);
// Elements of a tensor of this shape, overflow-checked like parameter_count.
int64_t element_count(const std::vector<int64_t>& shape);
// Overflow-checked (Error when a size does not fit 64 bits).
int64_t parameter_count(const WanConfig& config);
// Whether a parameter (official name) is a VACE model's VACE branch's
// (vace_blocks, vace_patch_embedding): what --trainable vace trains, and
// what a text-to-video model's weights lack.
bool in_vace_branch(const std::string& name);
// The VACE branch's parameters of `config` (0 without one).
int64_t vace_branch_parameter_count(const WanConfig& config);
// The ZeRO-3 unit (nn/parameter_units.hpp) of parameter `name` of
// WanModel(config): a VACE block's is the base block whose hint it adds
// (vace_layers), so that it is gathered and released with that block;
// every other parameter's is nn::parameter_unit(name).
std::string zero_unit(const WanConfig& config, const std::string& name);
inline constexpr int64_t kMaxParameters = 1'000'000'000'000;  // validate() refuses more

}  // namespace wt::wan
