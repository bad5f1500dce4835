#include "wantrain/wan/encoders/text_encoder.hpp"

#include <torch/torch.h>

#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

TextEncoder::TextEncoder(const TextEncoderFiles& files, const c10::Device& device)
    : tokenizer_(files.tokenizer), device_(device), text_len_(files.text_len) {
  const T5Config config = files.config.empty() ? T5Config{} : load_t5_config(files.config);
  const TensorSource weights = open_t5_weights(files.weights);  // names and shapes checked before a byte is made
  encoder_ = T5Encoder(config, files.dtype);
  load_weights(*encoder_, weights);
  encoder_->to(device_);
  encoder_->eval();
}

TextEncoder::Encoded TextEncoder::encode(const std::vector<std::string>& prompts) {
  torch::NoGradGuard no_grad;
  const auto tokens = tokenizer_.encode(prompts, text_len_);
  auto out = encoder_->forward(tokens.ids.to(device_), tokens.mask.to(device_)).to(torch::kCPU, torch::kFloat32);
  Encoded encoded;
  encoded.truncated = tokens.truncated;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t length = tokens.lengths[b];
    encoded.lengths.push_back(int32_t(length));
    out[int64_t(b)].slice(0, length).zero_();  // Wan cuts each embedding to its tokens, zero-padded to L
  }
  encoded.embedding = out;
  return encoded;
}

}  // namespace wt::wan
