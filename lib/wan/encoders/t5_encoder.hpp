// The umT5 text encoder of Wan (the official wan/modules/t5.py T5Encoder),
// in LibTorch, under the official parameter names, so that the released
// models_t5_umt5-xxl-enc-bf16.pth loads by name:
//
//   token_embedding.weight                         [vocab, dim]
//   blocks.N.norm1.weight, blocks.N.norm2.weight   [dim]      T5's RMS norm
//   blocks.N.attn.{q,k,v}.weight                   [dim_attn, dim], o [dim, dim_attn]
//   blocks.N.ffn.gate.0.weight, blocks.N.ffn.fc1.weight  [dim_ffn, dim]
//   blocks.N.ffn.fc2.weight                        [dim, dim_ffn]
//   blocks.N.pos_embedding.embedding.weight        [num_buckets, num_heads] (shared_pos false)
//   pos_embedding.embedding.weight                 (shared_pos true, instead)
//   norm.weight                                    [dim]
//
// Each block: x += attn(norm1(x)) with a per-layer relative position bias
// (bidirectional buckets, max distance 128) and no 1/sqrt(d) scaling, the
// padding masked; x += fc2(fc1(y) * gelu_tanh(gate(y))) with y = norm2(x).
// Linear layers have no bias. fp16 activations are clamped to the finite
// range after each residual, as the official code does.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "wantrain/wan/model/diffusers_folder.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

// The official constructor's arguments; the default is umT5-XXL.
struct T5Config {
  int64_t vocab = 256384, dim = 4096, dim_attn = 4096, dim_ffn = 10240, num_heads = 64, num_layers = 24,
          num_buckets = 32;
  bool shared_pos = false;
};

// A JSON object of those keys (missing keys keep the default); UsageError
// naming the file and key otherwise.
T5Config load_t5_config(const std::string& path);
T5Config parse_t5_config(const std::string& json_text, const std::string& source);

class T5EncoderImpl : public torch::nn::Module {
 public:
  // Parameters in `dtype` (the released weights are bf16: never an fp32
  // copy), drawn as the official init_weights draws them.
  explicit T5EncoderImpl(const T5Config& config, at::ScalarType dtype = at::kFloat);
  // ids [B, L] int64, mask [B, L] (1 for a token, 0 for padding) ->
  // [B, L, dim] in the weights' dtype.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& mask);
  const T5Config& config() const { return config_; }

 private:
  T5Config config_;
  at::Tensor token_weight_, norm_weight_;
  torch::nn::ModuleList blocks_{nullptr};
  std::shared_ptr<torch::nn::Module> shared_pos_;  // shared_pos only
};
TORCH_MODULE(T5Encoder);

// The encoder's weights from a .pth or safetensors file (or index) in the
// official names, or in Hugging Face's UMT5EncoderModel names, mapped:
//   shared.weight / encoder.embed_tokens.weight       -> token_embedding.weight
//   encoder.block.N.layer.0.SelfAttention.{q,k,v,o}   -> blocks.N.attn.{q,k,v,o}
//   ...layer.0.SelfAttention.relative_attention_bias  -> blocks.N.pos_embedding.embedding
//   ...layer.0.layer_norm / ...layer.1.layer_norm     -> blocks.N.norm1 / norm2
//   ...layer.1.DenseReluDense.{wi_0,wi_1,wo}          -> blocks.N.ffn.{gate.0,fc1,fc2}
//   encoder.final_layer_norm                          -> norm
// (UMT5's feed-forward is act(wi_0 x) * wi_1 x, the official gate and fc1.)
TensorSource open_t5_weights(const std::string& path);

// A transformers UMT5EncoderModel folder (save_pretrained: config.json and
// model.safetensors or its shards' index), `text_encoder/` of a diffusers
// pipeline or the pipeline's root holding it; open_t5_weights reads its
// weights. nullopt for a file; UsageError for a folder with no model.
std::optional<ModelFolder> text_encoder_folder(const std::string& path);
// The weights file of `path`: its own, or its folder's.
std::string t5_weights_file(const std::string& path);
// Its config.json (UMT5Config) as a T5Config: d_model, num_heads x d_kv,
// d_ff, num_layers, relative_attention_num_buckets, vocab_size. UsageError
// naming the key for what umT5 is not (gated-gelu feed-forward, position
// buckets to distance 128, a bias in every layer).
T5Config hugging_face_t5_config(const std::string& config_json);

// The bucket of each relative position (key − query), T5's bidirectional
// scheme: exact below num_buckets / 4 each way, logarithmic up to
// `max_distance`. [Lq, Lk] int64.
at::Tensor t5_position_buckets(int64_t query_len, int64_t key_len, int64_t num_buckets, int64_t max_distance = 128);

}  // namespace wt::wan
