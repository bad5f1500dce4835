#include "wantrain/wan/model/weight_names.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace wt::wan {
namespace {

struct Rule {
  const char* official;
  const char* diffusers;
};

// A rule ending in '.' renames a prefix; otherwise it renames a whole name.
constexpr Rule kTopRules[] = {
    {"time_embedding.0.", "condition_embedder.time_embedder.linear_1."},
    {"time_embedding.2.", "condition_embedder.time_embedder.linear_2."},
    {"text_embedding.0.", "condition_embedder.text_embedder.linear_1."},
    {"text_embedding.2.", "condition_embedder.text_embedder.linear_2."},
    {"time_projection.1.", "condition_embedder.time_proj."},
    {"head.head.", "proj_out."},
    {"head.modulation", "scale_shift_table"},
    // Wan2.1 I2V/FLF2V's MLPProj, diffusers' WanImageEmbedding
    {"img_emb.proj.0.", "condition_embedder.image_embedder.norm1."},
    {"img_emb.proj.1.", "condition_embedder.image_embedder.ff.net.0.proj."},
    {"img_emb.proj.3.", "condition_embedder.image_embedder.ff.net.2."},
    {"img_emb.proj.4.", "condition_embedder.image_embedder.norm2."},
    {"img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"},
};

// Applied after a "blocks.N." or "vace_blocks.N." prefix. diffusers' norm2
// is Wan's affine norm3 (before cross-attention); the other block norms have
// no parameters. A VACE block's before_proj and after_proj are diffusers'
// proj_in and proj_out.
constexpr Rule kBlockRules[] = {
    {"modulation", "scale_shift_table"},
    {"self_attn.q.", "attn1.to_q."},
    {"self_attn.k.", "attn1.to_k."},
    {"self_attn.v.", "attn1.to_v."},
    {"self_attn.o.", "attn1.to_out.0."},
    {"self_attn.norm_q.", "attn1.norm_q."},
    {"self_attn.norm_k.", "attn1.norm_k."},
    {"cross_attn.q.", "attn2.to_q."},
    {"cross_attn.k.", "attn2.to_k."},
    {"cross_attn.v.", "attn2.to_v."},
    {"cross_attn.o.", "attn2.to_out.0."},
    {"cross_attn.norm_q.", "attn2.norm_q."},
    {"cross_attn.norm_k.", "attn2.norm_k."},
    {"norm3.", "norm2."},
    {"ffn.0.", "ffn.net.0.proj."},
    {"ffn.2.", "ffn.net.2."},
    {"cross_attn.k_img.", "attn2.add_k_proj."},
    {"cross_attn.v_img.", "attn2.add_v_proj."},
    {"cross_attn.norm_k_img.", "attn2.norm_added_k."},
    {"before_proj.", "proj_in."},
    {"after_proj.", "proj_out."},
};

// Length of "blocks.N." or "vace_blocks.N." at the start of `name`, or 0.
size_t block_prefix_length(const std::string& name) {
  for (const std::string blocks : {"blocks.", "vace_blocks."}) {
    if (name.compare(0, blocks.size(), blocks) != 0) continue;
    size_t i = blocks.size();
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
    return i > blocks.size() && i < name.size() && name[i] == '.' ? i + 1 : 0;
  }
  return 0;
}

}  // namespace

const std::vector<std::string>& block_linear_names() {
  static const std::vector<std::string> names = {
      "self_attn.q",  "self_attn.k",  "self_attn.v", "self_attn.o", "cross_attn.q",     "cross_attn.k",
      "cross_attn.v", "cross_attn.o", "ffn.0",       "ffn.2",       "cross_attn.k_img", "cross_attn.v_img"};
  return names;
}

std::string block_linear(const std::string& name) {
  const size_t prefix = block_prefix_length(name);
  const size_t last = name.rfind('.');
  if (prefix == 0 || last == std::string::npos || last < prefix) return "";
  const std::string layer = name.substr(prefix, last - prefix);
  const auto& names = block_linear_names();
  return std::find(names.begin(), names.end(), layer) != names.end() ? layer : "";
}

namespace {

template <size_t N>
std::string rename(const std::string& name, const Rule (&rules)[N], bool to_official) {
  for (const Rule& rule : rules) {
    const std::string from = to_official ? rule.diffusers : rule.official;
    const std::string to = to_official ? rule.official : rule.diffusers;
    if (from.back() == '.' ? name.compare(0, from.size(), from) == 0 : name == from)
      return to + name.substr(from.size());
  }
  return name;
}

std::string translate(const std::string& name, bool to_official) {
  if (const size_t prefix = block_prefix_length(name))
    return name.substr(0, prefix) + rename(name.substr(prefix), kBlockRules, to_official);
  return rename(name, kTopRules, to_official);
}

}  // namespace

std::string official_name(const std::string& diffusers) { return translate(diffusers, true); }
std::string diffusers_name(const std::string& official) { return translate(official, false); }

bool uses_diffusers_names(const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.rfind("condition_embedder.", 0) == 0 || n.rfind("proj_out.", 0) == 0 || n == "scale_shift_table" ||
           n.find(".attn1.") != std::string::npos;
  });
}

bool held_in_bf16_by_teacher(const std::string& name) {
  return name.rfind("text_embedding.", 0) == 0 || !block_linear(name).empty();
}

}  // namespace wt::wan
