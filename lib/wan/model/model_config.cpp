#include "wantrain/wan/model/model_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/text.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/wan/model/diffusers_folder.hpp"

namespace wt::wan {
namespace {

using nlohmann::json;

constexpr const char* kKeys[] = {"dim",      "ffn_dim",  "num_heads",      "num_layers", "freq_dim",
                                 "text_dim", "text_len", "patch_size",     "in_dim",     "out_dim",
                                 "eps",      "qk_norm",  "cross_attn_norm"};

// Optional keys: absent, they mean a text-to-video model.
constexpr const char* kOptionalKeys[] = {"model_type",  "image_dim",    "image_tokens",   "vace_layers",
                                         "vace_in_dim", "add_ref_conv", "in_dim_ref_conv"};
constexpr int64_t kDefaultImageTokens = 257;

// Keys Wan's own config files carry that do not change the network we build.
// The release's config.json carries its class (WanModel, VaceWanModel) and the diffusers version it was saved with.
bool informational_key(const std::string& key) {
  return key == "_class_name" || key == "_diffusers_version" || key == "_comment" || key == "name";
}

bool camera_adapter_key(const std::string& key) {
  return key == "add_control_adapter" || key == "in_dim_control_adapter" || key == "downscale_factor_control_adapter";
}

constexpr std::pair<ModelType, const char*> kModelTypes[] = {{ModelType::T2V, "t2v"},
                                                             {ModelType::I2V, "i2v"},
                                                             {ModelType::FLF2V, "flf2v"},
                                                             {ModelType::TI2V, "ti2v"},
                                                             {ModelType::VACE, "vace"}};

int64_t positive_int(const json& doc, const char* key, const std::string& source) {
  const json& v = doc.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    throw UsageError(
        fmt::format("model config {}: '{}' must be a positive integer, got {}", source, key, json_excerpt(v)));
  return v.get<int64_t>();
}

bool boolean(const json& doc, const char* key, const std::string& source) {
  const json& v = doc.at(key);
  if (!v.is_boolean())
    throw UsageError(fmt::format("model config {}: '{}' must be true or false, got {}", source, key, json_excerpt(v)));
  return v.get<bool>();
}

}  // namespace

const char* model_type_name(ModelType type) {
  for (const auto& [value, name] : kModelTypes)
    if (value == type) return name;
  return "?";
}

void validate(const WanConfig& c, const std::string& source) {
  auto fail = [&](const std::string& what) { throw UsageError(fmt::format("model config {}: {}", source, what)); };
  for (auto [key, value] : {std::pair<const char*, int64_t>{"dim", c.dim},
                            {"ffn_dim", c.ffn_dim},
                            {"num_heads", c.num_heads},
                            {"num_layers", c.num_layers},
                            {"freq_dim", c.freq_dim},
                            {"text_dim", c.text_dim},
                            {"text_len", c.text_len},
                            {"in_dim", c.in_dim},
                            {"out_dim", c.out_dim}})
    if (value < 1) fail(fmt::format("'{}' must be a positive integer, got {}", key, value));
  // Caps far above any released Wan model (14B: dim 5120, 40 layers), so
  // that a corrupt or hostile config is refused here, before any size is
  // multiplied out or any memory allocated.
  for (auto [key, value, cap] : {std::tuple<const char*, int64_t, int64_t>{"dim", c.dim, 1 << 16},
                                 {"ffn_dim", c.ffn_dim, 1 << 18},
                                 {"num_heads", c.num_heads, 1 << 10},
                                 {"num_layers", c.num_layers, 1 << 10},
                                 {"freq_dim", c.freq_dim, 1 << 16},
                                 {"text_dim", c.text_dim, 1 << 16},
                                 {"text_len", c.text_len, 1 << 20},
                                 {"in_dim", c.in_dim, 1 << 12},
                                 {"out_dim", c.out_dim, 1 << 12}})
    if (value > cap) fail(fmt::format("'{}' is {}, more than {}, the most wantrain accepts", key, value, cap));
  for (int64_t p : c.patch_size)
    if (p < 1 || p > 64)
      fail(fmt::format("'patch_size' must hold three integers in 1..64, got [{}]", fmt::join(c.patch_size, ",")));
  if (c.dim % c.num_heads != 0) fail(fmt::format("'dim' {} is not divisible by 'num_heads' {}", c.dim, c.num_heads));
  if (c.head_dim() % 2 != 0)
    fail(fmt::format("head dim dim/num_heads = {} must be even (RoPE rotates channel pairs)", c.head_dim()));
  if (c.freq_dim % 2 != 0) fail(fmt::format("'freq_dim' {} must be even (cos and sin halves)", c.freq_dim));
  if (!(c.eps > 0.0 && c.eps < 1.0)) fail(fmt::format("'eps' must be in (0, 1), got {}", c.eps));
  if (c.image_dim < 0 || c.image_dim > (1 << 16))
    fail(fmt::format("'image_dim' must be in 0..{}, got {}", 1 << 16, c.image_dim));
  if (c.image_tokens < 1 || c.image_tokens > (1 << 12))
    fail(fmt::format("'image_tokens' must be in 1..{}, got {}", 1 << 12, c.image_tokens));
  // VideoX-Fun's Fun-Control models call themselves i2v: Wan2.1-Fun's y
  // holds the control video's latents and the start frame's (3 * out_dim in
  // all), Wan2.2-Fun's the control's and an i2v condition (3 * out_dim + 4).
  if (c.image_conditioned() && c.in_dim != 2 * c.out_dim + 4 && !c.fun_control())
    fail(fmt::format(
        "'model_type' {} reads the noisy latents with the condition y (4 mask channels and the "
        "latents), so 'in_dim' must be 2 * out_dim + 4 = {}{}, got {}",
        model_type_name(c.model_type), 2 * c.out_dim + 4,
        c.model_type == ModelType::I2V
            ? fmt::format(" (or 3 * out_dim = {} or 3 * out_dim + 4 = {}: a Fun-Control model's control and "
                          "start frame)",
                          3 * c.out_dim, 3 * c.out_dim + 4)
            : std::string(),
        c.in_dim));
  if (c.model_type == ModelType::TI2V && c.in_dim != c.out_dim)
    fail(fmt::format(
        "'model_type' ti2v reads the latents alone, so 'in_dim' must be out_dim = {} (or 3 * out_dim + "
        "4 = {}: Wan2.2-Fun-5B-Control's control and start frame), got {}{}",
        c.out_dim, 3 * c.out_dim + 4, c.in_dim,
        c.in_dim == 2 * c.out_dim + 4 ? " (2 * out_dim + 4: VideoX-Fun's Wan2.2-Fun-5B-InP, not in wantrain yet)"
                                      : ""));
  if (c.ref_conv && !c.fun_control())
    fail(
        fmt::format("'add_ref_conv' is for a Fun-Control model ('model_type' i2v, 'in_dim' 3 * out_dim = {} or "
                    "3 * out_dim + 4 = {}); this one is {} with 'in_dim' {}",
                    3 * c.out_dim, 3 * c.out_dim + 4, model_type_name(c.model_type), c.in_dim));
  if (!c.image_conditioned() && c.image_dim != 0)
    fail(fmt::format("'image_dim' {} is for an i2v or flf2v model; 'model_type' is {}", c.image_dim,
                     model_type_name(c.model_type)));
  if (!c.image_branch() && c.image_tokens != kDefaultImageTokens)
    fail(fmt::format("'image_tokens' {} is for a model with the CLIP branch ('image_dim' > 0)", c.image_tokens));
  if (c.model_type == ModelType::FLF2V && c.image_dim == 0)
    fail("'model_type' flf2v needs the CLIP branch: 'image_dim' must be positive (Wan2.1: 1280)");
  if (c.vace()) {
    const auto& layers = c.vace_layers;
    bool ascending = !layers.empty() && layers.front() == 0;
    for (size_t i = 0; i < layers.size() && ascending; ++i)
      ascending = layers[i] < c.num_layers && (i == 0 || layers[i] > layers[i - 1]);
    // The official model adds the n-th VACE block's hint after block
    // vace_layers[n], diffusers' after the n-th listed block it meets: the
    // same only for an ascending list.
    if (!ascending)
      fail(
          fmt::format("'vace_layers' must list base blocks in ascending order from 0, each below num_layers {}, "
                      "got [{}]",
                      c.num_layers, fmt::join(layers, ",")));
    if (c.vace_in_dim < 1 || c.vace_in_dim > (1 << 12))
      fail(fmt::format("'vace_in_dim' must be in 1..{}, got {}", 1 << 12, c.vace_in_dim));
  } else if (!c.vace_layers.empty() || c.vace_in_dim != 0) {
    fail(fmt::format("'vace_layers' and 'vace_in_dim' are for a VACE model; 'model_type' is {}",
                     model_type_name(c.model_type)));
  }
  if (const int64_t params = parameter_count(c); params > kMaxParameters)
    fail(fmt::format("{} parameters, more than {:.0e}, the most wantrain accepts", params, double(kMaxParameters)));
}

WanConfig parse_model_config(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = parse_json(text);
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("model config {}: not valid JSON ({})", source, e.what()));
  }
  if (!doc.is_object()) throw UsageError(fmt::format("model config {}: expected a JSON object", source));
  // Unknown keys first: a misspelled key is the cause of the missing one it was meant to be.
  const std::vector<std::string> keys(std::begin(kKeys), std::end(kKeys));
  std::vector<std::string> all_keys = keys;
  all_keys.insert(all_keys.end(), std::begin(kOptionalKeys), std::end(kOptionalKeys));
  for (const auto& item : doc.items()) {
    if (camera_adapter_key(item.key())) {
      // VideoX-Fun's camera-control models: named, not "unknown"; without the adapter the keys change nothing.
      if (doc.contains("add_control_adapter") && doc.at("add_control_adapter") != false)
        throw UsageError(
            fmt::format("model config {}: 'add_control_adapter' is VideoX-Fun's camera-control adapter "
                        "(Wan-Fun-Control-Camera): wantrain takes Fun-Control models without it, not with it yet",
                        source));
      continue;
    }
    const bool known = std::find(all_keys.begin(), all_keys.end(), item.key()) != all_keys.end();
    if (!known && !informational_key(item.key())) {
      const std::string hint = did_you_mean(item.key(), all_keys);
      throw UsageError(fmt::format("model config {}: unknown key '{}'{}", source, item.key(),
                                   hint.empty() ? fmt::format(" (expected {})", fmt::join(all_keys, ", ")) : hint));
    }
  }
  for (const auto& key : keys)
    if (!doc.contains(key)) throw UsageError(fmt::format("model config {}: missing key '{}'", source, key));

  WanConfig c;
  c.dim = positive_int(doc, "dim", source);
  c.ffn_dim = positive_int(doc, "ffn_dim", source);
  c.num_heads = positive_int(doc, "num_heads", source);
  c.num_layers = positive_int(doc, "num_layers", source);
  c.freq_dim = positive_int(doc, "freq_dim", source);
  c.text_dim = positive_int(doc, "text_dim", source);
  c.text_len = positive_int(doc, "text_len", source);
  c.in_dim = positive_int(doc, "in_dim", source);
  c.out_dim = positive_int(doc, "out_dim", source);
  const json& patch = doc.at("patch_size");
  if (!patch.is_array() || patch.size() != 3 || !std::all_of(patch.begin(), patch.end(), [](const json& p) {
        return p.is_number_integer() && p.get<int64_t>() >= 1;
      }))
    throw UsageError(fmt::format("model config {}: 'patch_size' must be three positive integers [f, h, w], got {}",
                                 source, json_excerpt(patch)));
  for (size_t i = 0; i < 3; ++i) c.patch_size[i] = patch[i].get<int64_t>();
  const json& eps = doc.at("eps");
  if (!eps.is_number())
    throw UsageError(fmt::format("model config {}: 'eps' must be a number, got {}", source, json_excerpt(eps)));
  c.eps = eps.get<double>();
  c.qk_norm = boolean(doc, "qk_norm", source);
  c.cross_attn_norm = boolean(doc, "cross_attn_norm", source);
  if (doc.contains("model_type")) {
    const json& v = doc.at("model_type");
    std::vector<std::string> names;
    for (const auto& [type, name] : kModelTypes) names.push_back(name);
    const auto found = v.is_string() ? std::find(names.begin(), names.end(), v.get<std::string>()) : names.end();
    if (found == names.end())
      throw UsageError(fmt::format("model config {}: 'model_type' must be one of {}, got {}", source,
                                   fmt::join(names, ", "), json_excerpt(v)));
    c.model_type = kModelTypes[found - names.begin()].first;
  }
  // Wan2.2-Fun-5B-Control is TI2V-5B with a control's y (3 out_dim + 4
  // channels in): VideoX-Fun builds the same module whichever it is called.
  if (c.model_type == ModelType::TI2V && c.in_dim == 3 * c.out_dim + 4) c.model_type = ModelType::I2V;
  if (doc.contains("image_dim")) {
    const json& v = doc.at("image_dim");
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw UsageError(
          fmt::format("model config {}: 'image_dim' must be an integer, 0 or more, got {}", source, json_excerpt(v)));
    c.image_dim = v.get<int64_t>();
  }
  if (doc.contains("image_tokens")) c.image_tokens = positive_int(doc, "image_tokens", source);
  if (doc.contains("vace_layers")) {
    const json& v = doc.at("vace_layers");
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& i) { return i.is_number_integer(); }))
      throw UsageError(fmt::format("model config {}: 'vace_layers' must be a list of block numbers, got {}", source,
                                   json_excerpt(v)));
    for (const auto& i : v) c.vace_layers.push_back(i.get<int64_t>());
  }
  if (doc.contains("vace_in_dim")) c.vace_in_dim = positive_int(doc, "vace_in_dim", source);
  if (doc.contains("add_ref_conv")) c.ref_conv = boolean(doc, "add_ref_conv", source);
  if (doc.contains("in_dim_ref_conv")) {
    // The reference picture's latent frame: as many channels as the latents.
    const int64_t in = positive_int(doc, "in_dim_ref_conv", source);
    if (in != c.out_dim)
      throw UsageError(
          fmt::format("model config {}: 'in_dim_ref_conv' {} must equal 'out_dim' {} (ref_conv reads a "
                      "reference picture's latents)",
                      source, in, c.out_dim));
  }
  if (c.vace()) {
    // VaceWanModel's defaults: a hint after every second block, a context as wide as the latents.
    if (!doc.contains("vace_layers"))
      for (int64_t i = 0; i < c.num_layers; i += 2) c.vace_layers.push_back(i);
    if (!doc.contains("vace_in_dim")) c.vace_in_dim = c.in_dim;
  }
  validate(c, source);
  return c;
}

WanConfig load_model_config(const std::string& path) {
  // Wan2.2 A14B's two experts share one model config: the root gives it when both say the same.
  if (const auto experts = find_two_experts(path)) {
    const auto high = load_model_config(experts->high_noise), low = load_model_config(experts->low_noise);
    if (const auto difference = first_difference(high, low); !difference.empty())
      throw UsageError(
          fmt::format("{}: the two experts' config.json differ ({}): give one expert's folder", path, difference));
    return high;
  }
  // A diffusers folder (the transformer's, or a pipeline's root): its config.json.
  if (const auto folder = find_transformer_folder(path))
    return parse_diffusers_config(read_whole_file(folder->config), folder->config);
  if (const auto why = unreadable_file_reason(path); !why.empty())
    throw UsageError(fmt::format("model config {}: {}", path, why));
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("model config {}: cannot open the file", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (is_diffusers_config(text.str())) return parse_diffusers_config(text.str(), path);
  return parse_model_config(text.str(), path);
}

std::string first_difference(const WanConfig& a, const WanConfig& b) {
  const auto left = json::parse(to_json(a)), right = json::parse(to_json(b));
  for (const auto& [key, value] : left.items())
    if (!right.contains(key) || right[key] != value)
      return fmt::format("{}: {} vs {}", key, value.dump(), right.contains(key) ? right[key].dump() : "none");
  for (const auto& [key, value] : right.items())
    if (!left.contains(key)) return fmt::format("{}: none vs {}", key, value.dump());
  return {};
}

std::string to_json(const WanConfig& c) {
  json doc = {{"dim", c.dim},
              {"ffn_dim", c.ffn_dim},
              {"num_heads", c.num_heads},
              {"num_layers", c.num_layers},
              {"freq_dim", c.freq_dim},
              {"text_dim", c.text_dim},
              {"text_len", c.text_len},
              {"patch_size", c.patch_size},
              {"in_dim", c.in_dim},
              {"out_dim", c.out_dim},
              {"eps", c.eps},
              {"qk_norm", c.qk_norm},
              {"cross_attn_norm", c.cross_attn_norm}};
  // Only what differs from a text-to-video model: a t2v config (and the
  // checksums over it in earlier checkpoints) reads as it always has.
  if (c.model_type != ModelType::T2V) doc["model_type"] = model_type_name(c.model_type);
  if (c.image_dim > 0) doc["image_dim"] = c.image_dim;
  if (c.image_tokens != kDefaultImageTokens) doc["image_tokens"] = c.image_tokens;
  if (c.vace()) {
    doc["vace_layers"] = c.vace_layers;
    doc["vace_in_dim"] = c.vace_in_dim;
  }
  if (c.ref_conv) {  // VideoX-Fun's keys
    doc["add_ref_conv"] = true;
    doc["in_dim_ref_conv"] = c.out_dim;
  }
  return doc.dump();
}

std::vector<ParameterShape> parameter_shapes(const WanConfig& c) {
  const int64_t d = c.dim;
  std::vector<ParameterShape> shapes;
  auto linear = [&](const std::string& name, int64_t in, int64_t out) {
    shapes.push_back({name + ".weight", {out, in}});
    shapes.push_back({name + ".bias", {out}});
  };
  auto attention = [&](const std::string& prefix) {
    for (const char* proj : {"q", "k", "v", "o"}) linear(prefix + proj, d, d);
    if (c.qk_norm) {
      shapes.push_back({prefix + "norm_q.weight", {d}});
      shapes.push_back({prefix + "norm_k.weight", {d}});
    }
  };
  auto layer_norm = [&](const std::string& name, int64_t width) {
    shapes.push_back({name + ".weight", {width}});
    shapes.push_back({name + ".bias", {width}});
  };
  shapes.push_back({"patch_embedding.weight", {d, c.in_dim, c.patch_size[0], c.patch_size[1], c.patch_size[2]}});
  shapes.push_back({"patch_embedding.bias", {d}});
  linear("text_embedding.0", c.text_dim, d);
  linear("text_embedding.2", d, d);
  linear("time_embedding.0", c.freq_dim, d);
  linear("time_embedding.2", d, d);
  linear("time_projection.1", d, 6 * d);
  auto wan_block = [&](const std::string& block) {
    shapes.push_back({block + "modulation", {1, 6, d}});
    attention(block + "self_attn.");
    if (c.cross_attn_norm) {
      shapes.push_back({block + "norm3.weight", {d}});
      shapes.push_back({block + "norm3.bias", {d}});
    }
    attention(block + "cross_attn.");
    if (c.image_branch()) {
      linear(block + "cross_attn.k_img", d, d);
      linear(block + "cross_attn.v_img", d, d);
      if (c.qk_norm) shapes.push_back({block + "cross_attn.norm_k_img.weight", {d}});
    }
    linear(block + "ffn.0", d, c.ffn_dim);
    linear(block + "ffn.2", c.ffn_dim, d);
  };
  for (int64_t i = 0; i < c.num_layers; ++i) wan_block(fmt::format("blocks.{}.", i));
  shapes.push_back({"head.modulation", {1, 2, d}});
  linear("head.head", d, c.out_dim * c.patch_volume());
  if (c.image_branch()) {
    const int64_t w = c.image_dim;
    if (c.model_type == ModelType::FLF2V) shapes.push_back({"img_emb.emb_pos", {1, 2 * c.image_tokens, w}});
    layer_norm("img_emb.proj.0", w);
    linear("img_emb.proj.1", w, w);
    linear("img_emb.proj.3", w, d);
    layer_norm("img_emb.proj.4", d);
  }
  if (c.ref_conv) {
    shapes.push_back({"ref_conv.weight", {d, c.out_dim, c.patch_size[1], c.patch_size[2]}});
    shapes.push_back({"ref_conv.bias", {d}});
  }
  for (size_t n = 0; n < c.vace_layers.size(); ++n) {
    const std::string block = fmt::format("vace_blocks.{}.", n);
    wan_block(block);
    if (n == 0) linear(block + "before_proj", d, d);
    linear(block + "after_proj", d, d);
  }
  if (c.vace()) {
    shapes.push_back(
        {"vace_patch_embedding.weight", {d, c.vace_in_dim, c.patch_size[0], c.patch_size[1], c.patch_size[2]}});
    shapes.push_back({"vace_patch_embedding.bias", {d}});
  }
  return shapes;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      throw Error(fmt::format("a tensor of [{}] overflows 64 bits", fmt::join(shape, ",")));
  return n;
}

int64_t parameter_count(const WanConfig& config) {
  if (config.num_layers > (1 << 20)) throw Error(fmt::format("{} layers: not a model", config.num_layers));
  int64_t total = 0;
  for (const auto& [name, shape] : parameter_shapes(config))
    if (__builtin_add_overflow(total, element_count(shape), &total))
      throw Error("the parameter count overflows 64 bits");
  return total;
}

bool in_vace_branch(const std::string& name) {
  return name.rfind("vace_blocks.", 0) == 0 || name.rfind("vace_patch_embedding.", 0) == 0;
}

int64_t vace_branch_parameter_count(const WanConfig& config) {
  int64_t total = 0;
  for (const auto& [name, shape] : parameter_shapes(config))
    if (in_vace_branch(name)) total += element_count(shape);
  return total;
}

std::string zero_unit(const WanConfig& config, const std::string& name) {
  const std::string vace = "vace_blocks.";
  if (name.rfind(vace, 0) != 0) return nn::parameter_unit(name);
  const size_t n = std::stoul(name.substr(vace.size()));
  if (n >= config.vace_layers.size())
    throw Error(fmt::format("{}: the model has {} VACE blocks", name, config.vace_layers.size()));
  return fmt::format("blocks.{}", config.vace_layers[n]);
}

}  // namespace wt::wan
