#include "wantrain/wan/encoders/text_encoder.hpp"

#include <torch/torch.h>

#include <cstring>

#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {

TextEncoder::TextEncoder(const TextEncoderFiles& files, const c10::Device& device)
    : tokenizer_(files.tokenizer), device_(device), text_len_(files.text_len) {
  // A config file, else a transformers folder's config.json, else umT5-XXL's.
  const auto folder = text_encoder_folder(files.weights);
  const T5Config config = !files.config.empty() ? load_t5_config(files.config)
                          : folder              ? hugging_face_t5_config(folder->config)
                                                : T5Config{};
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

TextEncoder::Encoded encode_on_root(const distributed::World& world, const TextEncoderFiles& files,
                                    const c10::Device& device, const std::vector<std::string>& prompts) {
  TextEncoder::Encoded encoded;
  world.agree([&] {
    if (world.is_root()) encoded = TextEncoder(files, device).encode(prompts);
  });
  if (world.size() == 1) return encoded;
  // [B, L, D] fp32, then the B lengths and the truncated count, as bytes.
  std::string bytes;
  if (world.is_root()) {
    const auto embedding = encoded.embedding.contiguous();
    const int64_t sizes[3] = {embedding.size(0), embedding.size(1), embedding.size(2)};
    bytes.append(reinterpret_cast<const char*>(sizes), sizeof sizes);
    bytes.append(static_cast<const char*>(embedding.data_ptr()), size_t(embedding.numel()) * sizeof(float));
    bytes.append(reinterpret_cast<const char*>(encoded.lengths.data()), encoded.lengths.size() * sizeof(int32_t));
    bytes.append(reinterpret_cast<const char*>(&encoded.truncated), sizeof encoded.truncated);
  }
  world.broadcast(bytes);
  if (world.is_root()) return encoded;
  int64_t sizes[3];
  std::memcpy(sizes, bytes.data(), sizeof sizes);
  size_t at = sizeof sizes;
  encoded.embedding = torch::empty({sizes[0], sizes[1], sizes[2]}, torch::kFloat32);
  const size_t floats = size_t(encoded.embedding.numel()) * sizeof(float);
  std::memcpy(encoded.embedding.data_ptr(), bytes.data() + at, floats);
  at += floats;
  encoded.lengths.resize(size_t(sizes[0]));
  std::memcpy(encoded.lengths.data(), bytes.data() + at, encoded.lengths.size() * sizeof(int32_t));
  at += encoded.lengths.size() * sizeof(int32_t);
  std::memcpy(&encoded.truncated, bytes.data() + at, sizeof encoded.truncated);
  return encoded;
}

}  // namespace wt::wan
