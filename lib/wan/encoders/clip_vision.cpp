#include "wantrain/wan/encoders/clip_vision.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "wantrain/io/safetensors.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/wan/model/weights.hpp"

namespace wt::wan {
namespace {

constexpr double kNormEps = 1e-5;
// ViT-H's head width: the released tower's 1280 channels in 16 heads.
constexpr int64_t kHeadWidth = 80;
const std::string kPrefix = "visual.";

// U(-bound, bound) in `dtype` on `device`: PyTorch's default Linear and
// Conv2d draw (kaiming_uniform with a = sqrt(5) for weights, the same bound
// for biases), bound = 1 / sqrt(fan_in).
at::Tensor uniform(at::IntArrayRef shape, int64_t fan_in, const at::TensorOptions& options) {
  const double bound = 1 / std::sqrt(double(fan_in));
  return torch::empty(shape, options).uniform_(-bound, bound);
}

// A Linear or a LayerNorm: `weight` and `bias`.
struct AffineImpl : torch::nn::Module {
  AffineImpl(at::Tensor w, at::Tensor b)
      : weight(register_parameter("weight", std::move(w), /*requires_grad=*/false)),
        bias(register_parameter("bias", std::move(b), /*requires_grad=*/false)) {}
  at::Tensor weight, bias;
};
TORCH_MODULE(Affine);

Affine linear_layer(int64_t out, int64_t in, const at::TensorOptions& options) {
  return Affine(uniform({out, in}, in, options), uniform({out}, in, options));
}

Affine layer_norm_layer(int64_t dim, const at::TensorOptions& options) {
  return Affine(torch::ones({dim}, options), torch::zeros({dim}, options));
}

at::Tensor linear(const at::Tensor& x, const AffineImpl& layer) { return torch::linear(x, layer.weight, layer.bias); }

// The official LayerNorm: statistics and affine in fp32, handed back in x's dtype.
at::Tensor layer_norm(const at::Tensor& x, const AffineImpl& norm) {
  if (x.scalar_type() == at::kFloat) return torch::layer_norm(x, {x.size(-1)}, norm.weight, norm.bias, kNormEps);
  return torch::layer_norm(x.to(at::kFloat), {x.size(-1)}, norm.weight.to(at::kFloat), norm.bias.to(at::kFloat),
                           kNormEps)
      .to(x.scalar_type());
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(const ClipVisionConfig& c, const at::TensorOptions& options) : heads(c.num_heads) {
    const int64_t hidden = c.mlp_ratio * c.dim;
    norm1 = register_module("norm1", layer_norm_layer(c.dim, options));
    auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
    to_qkv = attn->register_module("to_qkv", linear_layer(3 * c.dim, c.dim, options));
    proj = attn->register_module("proj", linear_layer(c.dim, c.dim, options));
    norm2 = register_module("norm2", layer_norm_layer(c.dim, options));
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    fc1 = mlp->register_module("0", linear_layer(hidden, c.dim, options));
    fc2 = mlp->register_module("2", linear_layer(c.dim, hidden, options));
  }

  // Fused attention (LibTorch's flash kernel: scores and softmax in fp32
  // whatever x's dtype), as the official code's flash_attention.
  at::Tensor attention(const at::Tensor& x) {
    const int64_t b = x.size(0), s = x.size(1), c = x.size(2), d = c / heads;
    const auto qkv = linear(x, *to_qkv).view({b, s, 3, heads, d}).permute({2, 0, 3, 1, 4});  // [3, b, heads, s, d]
    const auto out = at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]);               // [b, heads, s, d]
    return linear(out.transpose(1, 2).reshape({b, s, c}), *proj);
  }

  at::Tensor forward(at::Tensor x) {
    x = x + attention(layer_norm(x, *norm1));
    return x + linear(torch::gelu(linear(layer_norm(x, *norm2), *fc1)), *fc2);
  }

  int64_t heads;
  Affine norm1{nullptr}, to_qkv{nullptr}, proj{nullptr}, norm2{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

std::string shape_text(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

int64_t ClipVisionConfig::tokens() const {
  const int64_t grid = image_size / patch_size;
  return 1 + grid * grid;
}

void check_clip_vision_config(const ClipVisionConfig& c, const std::string& source) {
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"image_size", c.image_size},
                                   {"patch_size", c.patch_size},
                                   {"dim", c.dim},
                                   {"mlp_ratio", c.mlp_ratio},
                                   {"num_heads", c.num_heads},
                                   {"num_layers", c.num_layers}})
    if (value < 1 || value > (1 << 16))
      throw UsageError(fmt::format("{}: CLIP \"{}\" must be a positive integer, not {}", source, key, value));
  if (c.image_size < c.patch_size)
    throw UsageError(fmt::format("{}: CLIP image_size {} is below patch_size {}", source, c.image_size, c.patch_size));
  if (c.dim % c.num_heads != 0)
    throw UsageError(fmt::format("{}: CLIP dim {} is not a multiple of num_heads {}", source, c.dim, c.num_heads));
}

ClipVisionImpl::ClipVisionImpl(const ClipVisionConfig& config, at::ScalarType dtype, at::Device device)
    : config_(config), dtype_(dtype) {
  check_clip_vision_config(config, "CLIP vision config");
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  const int64_t p = config.patch_size, dim = config.dim;
  const double gain = 1 / std::sqrt(double(dim));
  patch_weight_ = register_module("patch_embedding", std::make_shared<torch::nn::Module>())
                      ->register_parameter("weight", uniform({dim, 3, p, p}, 3 * p * p, options),
                                           /*requires_grad=*/false);
  cls_embedding_ = register_parameter("cls_embedding", torch::randn({1, 1, dim}, options).mul_(gain), false);
  pos_embedding_ =
      register_parameter("pos_embedding", torch::randn({1, config.tokens(), dim}, options).mul_(gain), false);
  pre_norm_ = register_module("pre_norm", layer_norm_layer(dim, options));
  transformer_ = register_module("transformer", torch::nn::ModuleList());
  for (int64_t i = 0; i + 1 < config.num_layers; ++i) transformer_->push_back(Block(config, options));
  eval();
}

at::Tensor ClipVisionImpl::features(const at::Tensor& images) const {
  if (images.dim() != 4 || images.size(0) < 1 || images.size(1) != 3 || images.size(2) < 1 || images.size(3) < 1 ||
      !images.is_floating_point())
    throw UsageError(fmt::format("CLIP features: images {} of {} must be [N, 3, H, W] floating point in [-1, 1]",
                                 shape_text(images.sizes()), c10::toString(images.scalar_type())));
  const auto device = patch_weight_.device();
  if (dtype_ == at::kHalf && device.is_cpu())
    throw UsageError(
        "CLIP features: fp16 weights need a CUDA device (LibTorch has no fp16 conv or matmul on the "
        "CPU); load them as bf16 or fp32");
  torch::NoGradGuard no_grad;
  const int64_t size = config_.image_size;
  const auto f32 = torch::TensorOptions().dtype(at::kFloat).device(device);
  auto x = torch::upsample_bicubic2d(images.to(f32), {size, size}, /*align_corners=*/false);
  const auto mean = torch::tensor({0.48145466f, 0.4578275f, 0.40821073f}, f32).view({1, 3, 1, 1});
  const auto stdev = torch::tensor({0.26862954f, 0.26130258f, 0.27577711f}, f32).view({1, 3, 1, 1});
  x = ((x * 0.5 + 0.5) - mean) / stdev;

  x = torch::conv2d(x.to(dtype_), patch_weight_, {}, config_.patch_size).flatten(2).transpose(1, 2);
  x = torch::cat({cls_embedding_.expand({x.size(0), 1, config_.dim}), x}, 1) + pos_embedding_;
  x = layer_norm(x, *pre_norm_->as<AffineImpl>());
  for (const auto& block : *transformer_) x = block->as<BlockImpl>()->forward(x);
  return x.to(at::kFloat);
}

namespace {

// Where a file keeps the tower: the official names ("visual." and the
// parameters' own names) or Hugging Face transformers' CLIPVisionModel
// names ("vision_model.", what ComfyUI's clip_vision_h.safetensors holds).
struct Layout {
  bool hugging_face = false;
  std::string label;   // in messages: "official names" or "Hugging Face names"
  std::string blocks;  // the blocks' prefix, before their index
  std::string root;    // Hugging Face's: "vision_model." (transformers 4), "" (transformers 5 saves it bare)

  // The file's names of a parameter (its official name, without "visual."):
  // one, or q, k and v for a to_qkv under Hugging Face names.
  std::vector<std::string> stored(const std::string& name) const {
    if (!hugging_face) return {kPrefix + name};
    static const std::map<std::string, std::string> whole = {
        {"cls_embedding", "embeddings.class_embedding"},
        {"pos_embedding", "embeddings.position_embedding.weight"},
        {"patch_embedding.weight", "embeddings.patch_embedding.weight"},
        {"patch_embedding.bias", "embeddings.patch_embedding.bias"},
        {"pre_norm.weight", "pre_layrnorm.weight"},
        {"pre_norm.bias", "pre_layrnorm.bias"}};
    if (const auto it = whole.find(name); it != whole.end()) return {root + it->second};
    static const std::regex block(R"(transformer\.(\d+)\.(norm1|norm2|attn\.to_qkv|attn\.proj|mlp\.0|mlp\.2)\.(.+))");
    static const std::map<std::string, std::string> parts = {{"norm1", "layer_norm1"},
                                                             {"norm2", "layer_norm2"},
                                                             {"attn.proj", "self_attn.out_proj"},
                                                             {"mlp.0", "mlp.fc1"},
                                                             {"mlp.2", "mlp.fc2"}};
    std::smatch m;
    if (!std::regex_match(name, m, block)) return {root + name};
    const std::string layer = blocks + m[1].str() + ".", leaf = "." + m[3].str();
    if (m[2] == "attn.to_qkv")
      return {layer + "self_attn.q_proj" + leaf, layer + "self_attn.k_proj" + leaf, layer + "self_attn.v_proj" + leaf};
    return {layer + parts.at(m[2].str()) + leaf};
  }

  // The shape each of stored(name) has in the file for a parameter of
  // `shape`: cls_embedding [1, 1, dim] is [dim], pos_embedding [1, tokens,
  // dim] is [tokens, dim], to_qkv's [3 dim, ...] three [dim, ...].
  std::vector<int64_t> stored_shape(const std::string& name, std::vector<int64_t> shape) const {
    if (!hugging_face) return shape;
    if (name == "cls_embedding" || name == "pos_embedding")
      return {shape.begin() + (name == "cls_embedding" ? 2 : 1), shape.end()};
    if (name.find(".attn.to_qkv.") != std::string::npos) shape[0] /= 3;
    return shape;
  }
};

Layout official_layout() { return {false, "official names", kPrefix + "transformer.", ""}; }
Layout hugging_face_layout(const std::string& root) {
  return {true, "Hugging Face names", root + "encoder.layers.", root};
}

bool has_prefix(const TensorSource& source, const std::string& prefix) {
  return std::any_of(source.shapes.begin(), source.shapes.end(),
                     [&](const auto& item) { return item.first.rfind(prefix, 0) == 0; });
}

// "CLIP weights PATH (LAYOUT): " of every message once the layout is known.
std::string where(const TensorSource& source, const Layout& layout) {
  return fmt::format("CLIP weights {} ({})", source.path, layout.label);
}

std::vector<int64_t> shape_of(const TensorSource& source, const Layout& layout, const std::string& name) {
  const auto it = source.shapes.find(name);
  if (it == source.shapes.end()) throw UsageError(fmt::format("{}: no tensor {}", where(source, layout), name));
  return it->second;
}

// The config the file's tensors describe (all but num_heads).
ClipVisionConfig config_from_shapes(const TensorSource& source, const Layout& layout) {
  ClipVisionConfig c;
  const std::string patch_name = layout.stored("patch_embedding.weight")[0];
  const auto patch = shape_of(source, layout, patch_name);
  if (patch.size() != 4 || patch[1] != 3 || patch[2] != patch[3] || patch[0] < 1 || patch[2] < 1)
    throw UsageError(
        fmt::format("{}: {} is {}, not [dim, 3, patch, patch]", where(source, layout), patch_name, shape_text(patch)));
  c.dim = patch[0];
  c.patch_size = patch[2];
  const std::string pos_name = layout.stored("pos_embedding")[0];
  auto pos = shape_of(source, layout, pos_name);
  const auto pos_text = shape_text(pos);
  if (layout.hugging_face) pos.insert(pos.begin(), 1);  // [tokens, dim] as the official [1, tokens, dim]
  const int64_t grid = pos.size() == 3 && pos[1] > 1 ? int64_t(std::llround(std::sqrt(double(pos[1] - 1)))) : 0;
  if (pos.size() != 3 || pos[0] != 1 || pos[2] != c.dim || grid < 1 || grid * grid != pos[1] - 1)
    throw UsageError(fmt::format("{}: {} is {}, not [{}1 + grid^2, {}] (a class token and a square grid)",
                                 where(source, layout), pos_name, pos_text, layout.hugging_face ? "" : "1, ", c.dim));
  c.image_size = grid * c.patch_size;
  int64_t layers = 0;
  for (const auto& [name, shape] : source.shapes) {
    if (name.rfind(layout.blocks, 0) != 0) continue;
    const auto dot = name.find('.', layout.blocks.size());
    const auto index = name.substr(layout.blocks.size(), dot == std::string::npos ? 0 : dot - layout.blocks.size());
    if (!index.empty() && index.size() <= 6 &&
        std::all_of(index.begin(), index.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      layers = std::max<int64_t>(layers, std::stoll(index) + 1);
  }
  if (layers == 0) throw UsageError(fmt::format("{}: no tensor {}0.*", where(source, layout), layout.blocks));
  c.num_layers = layers;
  const std::string mlp = layout.stored("transformer.0.mlp.0.weight")[0];
  const auto hidden = shape_of(source, layout, mlp);
  if (hidden.size() != 2 || hidden[1] != c.dim || hidden[0] < c.dim || hidden[0] % c.dim != 0)
    throw UsageError(fmt::format("{}: {} is {}, not [mlp_ratio * {}, {}] with a whole mlp_ratio", where(source, layout),
                                 mlp, shape_text(hidden), c.dim, c.dim));
  c.mlp_ratio = hidden[0] / c.dim;
  return c;
}

// num_heads: a safetensors file's "clip_num_heads" metadata, else dim / 80.
int64_t heads_of(const std::string& path, const TensorSource& source, const Layout& layout, int64_t dim) {
  if (!is_pth(path) && std::filesystem::path(path).extension() != ".json") {
    const auto& metadata = io::SafetensorsFile::open(path).metadata();
    const auto it = metadata.find("clip_num_heads");
    if (it != metadata.end()) {
      int64_t heads = 0;
      try {
        size_t used = 0;
        heads = std::stoll(it->second, &used);
        if (used != it->second.size()) heads = 0;
      } catch (const std::exception&) {
        heads = 0;
      }
      if (heads < 1 || dim % heads != 0)
        throw UsageError(fmt::format("{}: metadata clip_num_heads \"{}\" is not a divisor of dim {}",
                                     where(source, layout), it->second, dim));
      return heads;
    }
  }
  if (dim % kHeadWidth != 0)
    throw UsageError(
        fmt::format("{}: dim {} is not a multiple of ViT-H's head width {}; give the heads "
                    "as safetensors metadata clip_num_heads",
                    where(source, layout), dim, kHeadWidth));
  return dim / kHeadWidth;
}

// num_heads from a CLIPVisionModel folder's config.json, whose other values
// must be the tower the tensors describe (`shapes`) and run as Wan's does.
int64_t heads_of_folder(const std::string& config_json, const ClipVisionConfig& shapes) {
  auto doc = nlohmann::json::parse(read_whole_file(config_json), nullptr, false);
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object", config_json));
  if (doc.contains("vision_config") && doc["vision_config"].is_object()) doc = doc["vision_config"];  // a CLIPModel's
  auto integer = [&](const char* key) -> int64_t {
    if (!doc.contains(key) || !doc[key].is_number_integer())
      throw UsageError(fmt::format("{}: key \"{}\": missing or not an integer", config_json, key));
    return doc[key].get<int64_t>();
  };
  // transformers' CLIPVisionConfig runs quick_gelu when the key is absent.
  const std::string act = doc.contains("hidden_act") ? doc["hidden_act"].dump() : "\"quick_gelu\" (absent)";
  if (act != "\"gelu\"")
    throw UsageError(
        fmt::format("{}: key \"hidden_act\": {}, not \"gelu\": Wan's CLIP is open_clip's ViT-H/14, with "
                    "the exact GELU",
                    config_json, act));
  if (doc.contains("layer_norm_eps") && (!doc["layer_norm_eps"].is_number() || doc["layer_norm_eps"] != kNormEps))
    throw UsageError(fmt::format("{}: key \"layer_norm_eps\": {}, not the tower's {:g}", config_json,
                                 doc["layer_norm_eps"].dump(), kNormEps));
  const std::pair<const char*, int64_t> agreed[] = {{"hidden_size", shapes.dim},
                                                    {"patch_size", shapes.patch_size},
                                                    {"image_size", shapes.image_size},
                                                    {"intermediate_size", shapes.mlp_ratio * shapes.dim},
                                                    {"num_hidden_layers", shapes.num_layers}};
  for (const auto& [key, tensors] : agreed)
    if (integer(key) != tensors)
      throw UsageError(fmt::format("{}: key \"{}\": {}, but the weights beside it make {}", config_json, key,
                                   integer(key), tensors));
  const int64_t heads = integer("num_attention_heads");
  if (heads < 1 || shapes.dim % heads != 0)
    throw UsageError(fmt::format("{}: key \"num_attention_heads\": {} is not a divisor of hidden_size {}", config_json,
                                 heads, shapes.dim));
  return heads;
}

}  // namespace

std::optional<ModelFolder> image_encoder_folder(const std::string& path) {
  return path.empty() ? std::nullopt : find_model_folder(path, "image_encoder", "model");
}

std::string clip_weights_file(const std::string& path) {
  const auto folder = image_encoder_folder(path);
  return folder ? folder->weights : path;
}

ClipVision load_clip_vision(const std::string& given, at::ScalarType dtype, at::Device device) {
  const auto folder = image_encoder_folder(given);
  const std::string path = folder ? folder->weights : given;
  const TensorSource file = open_weights(path);
  Layout layout;
  if (has_prefix(file, kPrefix))
    layout = official_layout();
  else if (has_prefix(file, "vision_model."))
    layout = hugging_face_layout("vision_model.");
  else if (file.shapes.count("embeddings.class_embedding"))  // CLIPVisionModel as transformers 5 saves it
    layout = hugging_face_layout("");
  else
    throw UsageError(
        fmt::format("CLIP weights {}: neither visual.* (official) nor vision_model.* or embeddings.* (Hugging Face) "
                    "tensors (not a CLIP "
                    "image encoder)",
                    path));
  const std::string patch_bias = layout.stored("patch_embedding.bias")[0];
  if (file.shapes.count(patch_bias))
    throw UsageError(
        fmt::format("{}: {}: a tower without pre_norm, which Wan's CLIP is not", where(file, layout), patch_bias));
  ClipVisionConfig config = config_from_shapes(file, layout);
  config.num_heads = folder ? heads_of_folder(folder->config, config) : heads_of(path, file, layout, config.dim);
  check_clip_vision_config(config, where(file, layout));
  if (dtype == at::kHalf && device.is_cpu())
    throw UsageError(
        fmt::format("{}: fp16 needs a CUDA device (LibTorch has no fp16 conv or matmul on "
                    "the CPU); load them as bf16 or fp32",
                    where(file, layout)));

  ClipVision model(config, dtype, device);
  model->set_weights_layout(layout.label);
  // Only the tensors the model holds, checked by name and shape first, then
  // read one at a time from the file (a to_qkv as its q, k and v read and
  // joined, the embeddings reshaped, under Hugging Face names).
  TensorSource needed;
  needed.path = path;
  std::map<std::string, std::vector<std::string>> sources;  // official name -> the file's names
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const auto shape = item.value().sizes().vec();
    const auto names = layout.stored(item.key());
    const auto want = layout.stored_shape(item.key(), shape);
    for (const auto& stored : names) {
      const auto got = shape_of(file, layout, stored);
      if (got != want)
        throw UsageError(
            fmt::format("{}: {} is {}, expected {}", where(file, layout), stored, shape_text(got), shape_text(want)));
    }
    needed.shapes.emplace(item.key(), shape);
    needed.stored_names.emplace(item.key(), fmt::format("{}", fmt::join(names, " + ")));
    sources.emplace(item.key(), names);
  }
  needed.read = [read = file.read, sources = std::move(sources), shapes = needed.shapes](const std::string& name) {
    const auto& names = sources.at(name);
    if (names.size() == 1) return read(names[0]).reshape(shapes.at(name));
    std::vector<at::Tensor> parts;
    for (const auto& stored : names) parts.push_back(read(stored));
    return torch::cat(parts, 0);
  };
  load_weights(*model, needed, LoadMode::Strict);
  return model;
}

}  // namespace wt::wan
