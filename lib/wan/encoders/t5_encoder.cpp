#include "wantrain/wan/encoders/t5_encoder.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "wantrain/nn/gelu.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"

namespace wt::wan {
namespace {

// Parameters made in their dtype from the start: umT5-XXL in bf16 never has
// an fp32 copy.
at::Tensor normal(std::initializer_list<int64_t> shape, double std, at::ScalarType dtype) {
  return torch::empty(shape, torch::TensorOptions().dtype(dtype)).normal_(0, std);
}

struct WeightImpl : torch::nn::Module {  // a bias-free Linear or an Embedding: one `weight`
  WeightImpl(at::Tensor w) : weight(register_parameter("weight", std::move(w))) {}
  at::Tensor weight;
};
TORCH_MODULE(Weight);

// T5's RMS norm: no mean subtracted, no bias; the statistics in fp32.
at::Tensor t5_norm(const at::Tensor& x, const at::Tensor& weight) {
  auto y = x * torch::rsqrt(x.to(torch::kFloat).pow(2).mean(-1, /*keepdim=*/true) + 1e-6);
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) y = y.to(weight.scalar_type());
  return weight * y;
}

at::Tensor fp16_clamp(const at::Tensor& x) {
  if (x.scalar_type() != at::kHalf || !torch::isinf(x).any().item<bool>()) return x;
  const double limit = 65504.0 - 1000.0;
  return torch::clamp(x, -limit, limit);
}

struct RelativeBiasImpl : torch::nn::Module {
  RelativeBiasImpl(int64_t buckets, int64_t heads, at::ScalarType dtype)
      : buckets_(buckets),
        embedding(register_module(
            "embedding", Weight(normal({buckets, heads}, 1 / std::sqrt(2.0 * double(buckets * heads)), dtype)))) {}
  at::Tensor forward(int64_t length) {  // [1, heads, L, L]
    const auto index = t5_position_buckets(length, length, buckets_).to(embedding->weight.device());
    return torch::embedding(embedding->weight, index).permute({2, 0, 1}).unsqueeze(0).contiguous();
  }
  int64_t buckets_;
  Weight embedding;
};
TORCH_MODULE(RelativeBias);

struct T5BlockImpl : torch::nn::Module {
  T5BlockImpl(const T5Config& c, at::ScalarType dtype) : c_(c) {
    const double d = double(c.dim), a = double(c.dim_attn), f = double(c.dim_ffn);
    norm1 = register_module("norm1", Weight(torch::ones({c.dim}, torch::TensorOptions().dtype(dtype))));
    auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
    q = attn->register_module("q", Weight(normal({c.dim_attn, c.dim}, 1 / std::sqrt(d * a), dtype)));
    k = attn->register_module("k", Weight(normal({c.dim_attn, c.dim}, 1 / std::sqrt(d), dtype)));
    v = attn->register_module("v", Weight(normal({c.dim_attn, c.dim}, 1 / std::sqrt(d), dtype)));
    o = attn->register_module("o", Weight(normal({c.dim, c.dim_attn}, 1 / std::sqrt(double(c.num_heads) * a), dtype)));
    norm2 = register_module("norm2", Weight(torch::ones({c.dim}, torch::TensorOptions().dtype(dtype))));
    auto ffn = register_module("ffn", std::make_shared<torch::nn::Module>());
    auto gate_list = ffn->register_module("gate", torch::nn::ModuleList());
    gate = Weight(normal({c.dim_ffn, c.dim}, 1 / std::sqrt(d), dtype));
    gate_list->push_back(gate);
    fc1 = ffn->register_module("fc1", Weight(normal({c.dim_ffn, c.dim}, 1 / std::sqrt(d), dtype)));
    fc2 = ffn->register_module("fc2", Weight(normal({c.dim, c.dim_ffn}, 1 / std::sqrt(f), dtype)));
    if (!c.shared_pos)
      pos_embedding = register_module("pos_embedding", RelativeBias(c.num_buckets, c.num_heads, dtype));
  }

  at::Tensor attention(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& position_bias) {
    const int64_t b = x.size(0), n = c_.num_heads, h = c_.dim_attn / c_.num_heads;
    const auto qs = torch::linear(x, q->weight).view({b, -1, n, h});
    const auto ks = torch::linear(x, k->weight).view({b, -1, n, h});
    const auto vs = torch::linear(x, v->weight).view({b, -1, n, h});
    auto bias = x.new_zeros({b, n, qs.size(1), ks.size(1)}) + position_bias;
    // Padding keys get the lowest value of x's dtype, as the official code fills.
    const double lowest = x.scalar_type() == at::kHalf       ? -65504.0
                          : x.scalar_type() == at::kBFloat16 ? -3.3895313892515355e38
                          : x.scalar_type() == at::kDouble   ? std::numeric_limits<double>::lowest()
                                                             : double(std::numeric_limits<float>::lowest());
    bias.masked_fill_(mask.view({b, 1, 1, -1}) == 0, lowest);
    // Fused attention with the position bias and the padding as its additive
    // mask (LibTorch's flash kernel takes one on CPU); T5 has no 1/sqrt(d).
    const auto out = at::scaled_dot_product_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2),
                                                      bias.to(x.scalar_type()), 0.0, false, 1.0)
                         .transpose(1, 2)
                         .reshape({b, -1, n * h});
    return torch::linear(out, o->weight);
  }

  at::Tensor forward(at::Tensor x, const at::Tensor& mask, const at::Tensor& shared_bias) {
    const auto bias = pos_embedding ? pos_embedding->forward(x.size(1)) : shared_bias;
    x = fp16_clamp(x + attention(t5_norm(x, norm1->weight), mask, bias));
    const auto y = t5_norm(x, norm2->weight);
    const auto hidden = torch::linear(y, fc1->weight) * nn::gelu_tanh(torch::linear(y, gate->weight));
    return fp16_clamp(x + torch::linear(hidden, fc2->weight));
  }

  T5Config c_;
  Weight norm1{nullptr}, norm2{nullptr}, q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, gate{nullptr}, fc1{nullptr},
      fc2{nullptr};
  RelativeBias pos_embedding{nullptr};
};
TORCH_MODULE(T5Block);

}  // namespace

at::Tensor t5_position_buckets(int64_t query_len, int64_t key_len, int64_t num_buckets, int64_t max_distance) {
  const auto relative = torch::arange(key_len).unsqueeze(0) - torch::arange(query_len).unsqueeze(1);
  const int64_t half = num_buckets / 2, exact = half / 2;
  const auto side = (relative > 0).to(torch::kLong) * half;
  const auto distance = relative.abs();
  auto far = exact + (torch::log(distance.to(torch::kFloat) / double(exact)) /
                      std::log(double(max_distance) / double(exact)) * double(half - exact))
                         .to(torch::kLong);
  far = torch::min(far, torch::full_like(far, half - 1));
  return side + torch::where(distance < exact, distance, far);
}

namespace {

// The official name of a Hugging Face UMT5 encoder tensor; "" for one the
// encoder has no use for (its tied copy of the embedding).
std::string official_t5_name(const std::string& name) {
  static const std::regex block(R"(encoder\.block\.(\d+)\.layer\.([01])\.(.+)\.weight)");
  if (name == "shared.weight") return "token_embedding.weight";
  if (name == "encoder.final_layer_norm.weight") return "norm.weight";
  std::smatch m;
  if (!std::regex_match(name, m, block)) return name;  // not Hugging Face's: the load names it if unexpected
  const std::string n = m[1].str(), part = m[3].str();
  static const std::map<std::string, std::string> parts = {
      {"0/SelfAttention.q", "attn.q"},
      {"0/SelfAttention.k", "attn.k"},
      {"0/SelfAttention.v", "attn.v"},
      {"0/SelfAttention.o", "attn.o"},
      {"0/SelfAttention.relative_attention_bias", "pos_embedding.embedding"},
      {"0/layer_norm", "norm1"},
      {"1/DenseReluDense.wi_0", "ffn.gate.0"},
      {"1/DenseReluDense.wi_1", "ffn.fc1"},
      {"1/DenseReluDense.wo", "ffn.fc2"},
      {"1/layer_norm", "norm2"}};
  const auto it = parts.find(m[2].str() + "/" + part);
  return it == parts.end() ? name : "blocks." + n + "." + it->second + ".weight";
}

}  // namespace

std::optional<ModelFolder> text_encoder_folder(const std::string& path) {
  return path.empty() ? std::nullopt : find_model_folder(path, "text_encoder", "model");
}

std::string t5_weights_file(const std::string& path) {
  const auto folder = text_encoder_folder(path);
  return folder ? folder->weights : path;
}

T5Config hugging_face_t5_config(const std::string& config_json) {
  const auto doc = nlohmann::json::parse(read_whole_file(config_json), nullptr, false);
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object", config_json));
  auto integer = [&](const char* key) -> int64_t {
    if (!doc.contains(key) || !doc[key].is_number_integer())
      throw UsageError(fmt::format("{}: key \"{}\": missing or not an integer", config_json, key));
    return doc[key].get<int64_t>();
  };
  auto expect = [&](const char* key, const nlohmann::json& value, const char* why) {
    if (doc.contains(key) && doc[key] != value)
      throw UsageError(
          fmt::format("{}: key \"{}\": {}, not umT5's {} ({})", config_json, key, doc[key].dump(), value.dump(), why));
  };
  expect("feed_forward_proj", "gated-gelu", "the gated GELU feed-forward");
  expect("relative_attention_max_distance", 128, "the position buckets' reach");
  T5Config c;
  c.vocab = integer("vocab_size");
  c.dim = integer("d_model");
  c.num_heads = integer("num_heads");
  c.dim_attn = c.num_heads * integer("d_kv");
  c.dim_ffn = integer("d_ff");
  c.num_layers = integer("num_layers");
  c.num_buckets = integer("relative_attention_num_buckets");
  c.shared_pos = false;  // umT5: a position bias in every layer
  return c;
}

TensorSource open_t5_weights(const std::string& path) {
  const auto folder = text_encoder_folder(path);
  TensorSource file = open_weights(folder ? folder->weights : path);
  bool hugging_face = false;
  for (const auto& [name, shape] : file.shapes) hugging_face = hugging_face || name.rfind("encoder.", 0) == 0;
  if (!hugging_face) return file;
  TensorSource source;
  source.path = path;
  for (const auto& [name, shape] : file.shapes) {
    if (name == "encoder.embed_tokens.weight" && file.shapes.count("shared.weight")) continue;  // tied to shared
    const std::string official =
        name == "encoder.embed_tokens.weight" ? "token_embedding.weight" : official_t5_name(name);
    source.shapes.emplace(official, shape);
    if (official != name) source.stored_names.emplace(official, name);
  }
  source.read = [read = file.read, names = source.stored_names](const std::string& name) {
    const auto it = names.find(name);
    return read(it == names.end() ? name : it->second);
  };
  return source;
}

T5Config parse_t5_config(const std::string& json_text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = parse_json(json_text);
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object of T5 settings", source));
  T5Config c;
  for (const auto& [key, field] :
       std::initializer_list<std::pair<const char*, int64_t*>>{{"vocab", &c.vocab},
                                                               {"dim", &c.dim},
                                                               {"dim_attn", &c.dim_attn},
                                                               {"dim_ffn", &c.dim_ffn},
                                                               {"num_heads", &c.num_heads},
                                                               {"num_layers", &c.num_layers},
                                                               {"num_buckets", &c.num_buckets}}) {
    if (!doc.contains(key)) continue;
    if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < 1 || doc[key].get<int64_t>() > (1 << 24))
      throw UsageError(fmt::format("{}: \"{}\" must be a positive integer", source, key));
    *field = doc[key].get<int64_t>();
  }
  if (doc.contains("shared_pos")) {
    if (!doc["shared_pos"].is_boolean())
      throw UsageError(fmt::format("{}: \"shared_pos\" must be true or false", source));
    c.shared_pos = doc["shared_pos"].get<bool>();
  }
  for (const auto& [key, value] : doc.items())
    if (key != "vocab" && key != "dim" && key != "dim_attn" && key != "dim_ffn" && key != "num_heads" &&
        key != "num_layers" && key != "num_buckets" && key != "shared_pos")
      throw UsageError(fmt::format("{}: unknown key \"{}\"", source, key));
  if (c.dim_attn % c.num_heads != 0)
    throw UsageError(fmt::format("{}: dim_attn {} is not a multiple of num_heads {}", source, c.dim_attn, c.num_heads));
  if (c.num_buckets < 4 || c.num_buckets % 4 != 0)
    throw UsageError(fmt::format("{}: num_buckets must be a positive multiple of 4", source));
  return c;
}

T5Config load_t5_config(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty()) throw UsageError(fmt::format("{}: {}", path, why));
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_t5_config(text.str(), path);
}

T5EncoderImpl::T5EncoderImpl(const T5Config& config, at::ScalarType dtype) : config_(config) {
  token_weight_ = register_module("token_embedding", Weight(normal({config.vocab, config.dim}, 1.0, dtype)))->weight;
  if (config.shared_pos)
    shared_pos_ = register_module("pos_embedding", RelativeBias(config.num_buckets, config.num_heads, dtype));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) blocks_->push_back(T5Block(config, dtype));
  norm_weight_ =
      register_module("norm", Weight(torch::ones({config.dim}, torch::TensorOptions().dtype(dtype))))->weight;
}

at::Tensor T5EncoderImpl::forward(const at::Tensor& ids, const at::Tensor& mask) {
  auto x = torch::embedding(token_weight_, ids);
  at::Tensor shared;
  if (shared_pos_) shared = shared_pos_->as<RelativeBiasImpl>()->forward(ids.size(1));
  for (const auto& block : *blocks_) x = block->as<T5BlockImpl>()->forward(x, mask, shared);
  return t5_norm(x, norm_weight_);
}

}  // namespace wt::wan
