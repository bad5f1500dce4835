// The CLIP image encoder of Wan2.1's image-to-video (and first-last-frame)
// models: the visual tower of the official wan/modules/clip.py
// clip_xlm_roberta_vit_h_14 (a ViT-H/14, open_clip's XLM-RoBERTa-large
// CLIP), as its CLIPModel.visual runs it, in LibTorch. Parameters carry the
// official names with the "visual." prefix stripped, so that the released
// models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth loads by name:
//
//   patch_embedding.weight                       [dim, 3, patch, patch]  (no bias: the tower is pre-normed)
//   cls_embedding                                [1, 1, dim]
//   pos_embedding                                [1, 1 + (image_size / patch)^2, dim]
//   pre_norm.{weight,bias}                       [dim]
//   transformer.N.norm1.{weight,bias}            [dim]
//   transformer.N.attn.to_qkv.{weight,bias}      [3 dim, dim]  output channels [q | k | v], each [heads, dim / heads]
//   transformer.N.attn.proj.{weight,bias}        [dim, dim]
//   transformer.N.norm2.{weight,bias}            [dim]
//   transformer.N.mlp.0.{weight,bias}            [mlp_ratio dim, dim]  (mlp.1 is the GELU, mlp.3 a dropout)
//   transformer.N.mlp.2.{weight,bias}            [dim, mlp_ratio dim]
//
// Hugging Face transformers' CLIPVisionModel names (ComfyUI's
// clip_vision_h.safetensors, the same laion ViT-H/14 weights) load too,
// mapped onto these: vision_model.embeddings.class_embedding [dim] ->
// cls_embedding, .position_embedding.weight [tokens, dim] -> pos_embedding,
// .patch_embedding.weight -> patch_embedding.weight, pre_layrnorm ->
// pre_norm (transformers 5 saves a CLIPVisionModel without the
// "vision_model." prefix: those bare names load too), and in
// vision_model.encoder.layers.N: layer_norm1/2 -> norm1/2,
// self_attn.{q,k,v}_proj joined along the output rows -> attn.to_qkv,
// self_attn.out_proj -> attn.proj, mlp.fc1/fc2 -> mlp.0/2. Such a file does
// not name its activation (transformers' CLIPVisionConfig defaults to
// OpenAI's quick_gelu); the ViT-H/14 it holds is open_clip's, with the exact
// GELU (ComfyUI's and InvokeAI's ViT-H configs say "gelu"), which the tower
// always runs.
//
// Only the blocks N = 0 .. num_layers - 2 are held: Wan takes the hidden
// states before the last block (the official use_31_block), so the last
// block, post_norm and head (a [dim, 1024] projection), like the text tower
// (textual.*) and log_scale of the released file, are never read (nor the
// last layer, post_layernorm and visual_projection under Hugging Face names).
//
// Semantics. Images in [-1, 1] at any size are resized to image_size x
// image_size by bicubic interpolation (align_corners false, no antialiasing,
// no clamping: bicubic overshoots stay), mapped to [0, 1] by x * 0.5 + 0.5
// and normalised per channel by OpenAI CLIP's mean and std; a stride-patch
// conv makes the patch tokens (row-major over the grid), the class token
// goes in front, the position embedding is added as it is (no
// interpolation: the resize always yields image_size), then pre_norm.
// Blocks are pre-norm residual: x += proj(attention(norm1(x))), x +=
// mlp.2(gelu(mlp.0(norm2(x)))), with the exact (erf) GELU, not the
// QuickGELU that the official VisionTransformer defaults to, since
// clip_xlm_roberta_vit_h_14 asks for 'gelu'. Attention: all tokens, no mask,
// softmax(q k^T / sqrt(dim / heads)) v. LayerNorms (eps 1e-5) run in fp32
// and hand back the activations' dtype, as the official LayerNorm does.
//
// Precision. The official runs under fp16 autocast on the GPU with fp16
// weights (FlashAttention 2: scores in fp32, probabilities rounded to fp16
// for the product with v); here everything runs in the weights' dtype (fp32,
// bf16, or fp16 on CUDA), the scores and softmax in fp32 and the
// probabilities rounded to that dtype likewise; preprocessing is fp32 and
// the features are handed back in fp32.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <optional>
#include <utility>

#include "wantrain/wan/model/diffusers_folder.hpp"

namespace wt::wan {

// The visual tower's hyper-parameters (the official VisionTransformer's
// arguments); the default is ViT-H/14 of clip_xlm_roberta_vit_h_14.
struct ClipVisionConfig {
  int64_t image_size = 224, patch_size = 14, dim = 1280, mlp_ratio = 4, num_heads = 16, num_layers = 32;
  // Tokens of the features: the class token and the (image_size / patch_size)^2 patches (ViT-H/14: 257).
  int64_t tokens() const;
};

// UsageError naming `source` when the config cannot describe a tower
// (a non-positive value, image_size below patch_size, dim not a multiple of
// num_heads).
void check_clip_vision_config(const ClipVisionConfig& config, const std::string& source);

class ClipVisionImpl : public torch::nn::Module {
 public:
  // The blocks the features need (num_layers - 1 of them), parameters made
  // in `dtype` on `device` (never an fp32 copy of bf16 weights) and drawn as
  // PyTorch draws a fresh official module's; frozen (no gradients).
  // UsageError for a config check_clip_vision_config refuses.
  explicit ClipVisionImpl(const ClipVisionConfig& config, at::ScalarType dtype = at::kFloat,
                          at::Device device = at::kCPU);

  // images [N, 3, H, W] in [-1, 1], any H and W, any floating dtype and
  // device -> the hidden states after all blocks but the last, [N, tokens,
  // dim] fp32 on the weights' device, the class token first. No autograd.
  // UsageError for images of another shape, and for fp16 weights on the CPU
  // (LibTorch has no fp16 conv or matmul there).
  at::Tensor features(const at::Tensor& images) const;

  const ClipVisionConfig& config() const { return config_; }
  // The names its weights were read in, for messages: "official names" or
  // "Hugging Face names" after load_clip_vision, empty for a fresh tower.
  const std::string& weights_layout() const { return weights_layout_; }
  void set_weights_layout(std::string layout) { weights_layout_ = std::move(layout); }

 private:
  ClipVisionConfig config_;
  std::string weights_layout_;
  at::ScalarType dtype_;
  at::Tensor patch_weight_, cls_embedding_, pos_embedding_;
  torch::nn::ModuleList transformer_{nullptr};
  std::shared_ptr<torch::nn::Module> pre_norm_;
};
TORCH_MODULE(ClipVision);

// The tower from a .pth written by torch.save (the released
// models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth, the whole
// XLMRobertaCLIP state dict) or a safetensors file or index, in the official
// names with their "visual." prefix, or, when the file has no "visual."
// tensor but "vision_model." ones (or transformers 5's bare "embeddings."
// and "encoder.layers."), in Hugging Face's CLIPVisionModel names
// (ComfyUI's clip_vision_h.safetensors); every other tensor (textual.*,
// log_scale, the last block, post_norm, head; text_model.*, the last layer,
// post_layernorm, visual_projection, position_ids) is skipped unread. The
// config comes from the tensors: dim and patch_size from the patch
// embedding, image_size from the position embedding's (square) patch grid,
// mlp_ratio from block 0's first MLP matrix, num_layers from the highest
// block index + 1, and num_heads = dim / 80 (ViT-H's head width) unless a
// safetensors file's "__metadata__" gives "clip_num_heads". Weights become
// `dtype` on `device`, read one tensor at a time (a to_qkv as its q, k and v
// joined). UsageError in one line naming the file, the layout ("official
// names" or "Hugging Face names") and the tensor, in the file's own name,
// for a file with neither prefix, a needed tensor missing or of another
// shape, or a config it cannot tell.
//
// `path` may also be a transformers CLIPVisionModel folder
// (image_encoder_folder): its weights are read as above, in Hugging Face
// names, and its config.json gives num_heads (num_attention_heads) and must
// agree with the tensors on hidden_size, patch_size, image_size,
// intermediate_size and num_hidden_layers; a hidden_act other than "gelu"
// (transformers' default quick_gelu: not open_clip's ViT-H/14) or a
// layer_norm_eps other than 1e-5 is a UsageError naming the file and key.
ClipVision load_clip_vision(const std::string& path, at::ScalarType dtype = at::kFloat, at::Device device = at::kCPU);

// A transformers CLIPVisionModel folder (save_pretrained: config.json and
// model.safetensors or its shards' index): image_encoder/ of a diffusers
// image-to-video pipeline, or the pipeline's root holding it. nullopt for a
// file; UsageError for a folder with no model.
std::optional<ModelFolder> image_encoder_folder(const std::string& path);
// The weights file of `path`: a folder's model.safetensors (or index), else `path`.
std::string clip_weights_file(const std::string& path);

}  // namespace wt::wan
