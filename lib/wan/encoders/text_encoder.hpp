// Prompts to Wan's text conditioning: the umT5 tokenizer (Wan's cleaning,
// EOS, truncation at text_len) and the umT5 encoder, with the embedding cut
// to each prompt's tokens and zero past them, as Wan's T5EncoderModel hands
// it to WanModel.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wantrain/distributed/world.hpp"
#include "wantrain/wan/encoders/t5_encoder.hpp"
#include "wantrain/wan/encoders/t5_tokenizer.hpp"

namespace wt::wan {

struct TextEncoderFiles {
  std::string weights;                   // .pth or safetensors (file or index), official or Hugging Face names
  std::string config;                    // --t5-config JSON; empty: umT5-XXL
  std::string tokenizer;                 // spiece.model or the folder holding it
  at::ScalarType dtype = at::kBFloat16;  // the released weights' dtype
  int64_t text_len = 512;
};

class TextEncoder {
 public:
  // Loads the tokenizer and the weights (strictly: every name, every shape);
  // UsageError naming the file otherwise.
  TextEncoder(const TextEncoderFiles& files, const c10::Device& device);

  struct Encoded {
    at::Tensor embedding;          // [B, text_len, dim] fp32 on the CPU, zero past each prompt's tokens
    std::vector<int32_t> lengths;  // tokens of each prompt, EOS included
    int64_t truncated = 0;         // prompts cut at text_len
  };
  Encoded encode(const std::vector<std::string>& prompts);
  int64_t dim() const { return encoder_->config().dim; }
  int64_t text_len() const { return text_len_; }

 private:
  T5Tokenizer tokenizer_;
  T5Encoder encoder_{nullptr};
  c10::Device device_;
  int64_t text_len_;
};

// Collective over `world`: rank 0 alone loads the encoder (umT5-XXL: 11
// GiB in bf16) and encodes `prompts`; the other ranks receive what it made,
// so one encoder serves the job. A UsageError on rank 0 (weights that
// cannot be read) is the job's one line (World::agree).
TextEncoder::Encoded encode_on_root(const distributed::World& world, const TextEncoderFiles& files,
                                    const c10::Device& device, const std::vector<std::string>& prompts);

}  // namespace wt::wan
