#include "wantrain/wan/vae/vae_weights.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>
#include <vector>

#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool is_diffusers_vae_name(const std::string& name) {
  return starts_with(name, "quant_conv.") || starts_with(name, "post_quant_conv.") ||
         starts_with(name, "encoder.conv_in.") || starts_with(name, "decoder.conv_in.") ||
         starts_with(name, "encoder.down_blocks.") || starts_with(name, "decoder.up_blocks.") ||
         name.find(".mid_block.") != std::string::npos;
}

// A residual block's part: diffusers' name -> the official one; others as they are.
std::string official_part(const std::string& part) {
  static const std::vector<std::pair<std::string, std::string>> parts = {{"norm1.", "residual.0."},
                                                                         {"conv1.", "residual.2."},
                                                                         {"norm2.", "residual.3."},
                                                                         {"conv2.", "residual.6."},
                                                                         {"conv_shortcut.", "shortcut."}};
  for (const auto& [from, to] : parts)
    if (starts_with(part, from)) return to + part.substr(from.size());
  return part;
}

// Where the decoder's diffusers up blocks start in the official flat list
// of upsamples: each block holds its resnets, then its upsampler if any.
struct UpBlocks {
  std::map<int64_t, int64_t> resnets;  // block -> resnets in the file
  std::map<int64_t, bool> upsampler;   // block -> has one
  int64_t start(int64_t block) const {
    int64_t n = 0;
    for (int64_t i = 0; i < block; ++i) n += (resnets.count(i) ? resnets.at(i) : 0) + (upsampler.count(i) ? 1 : 0);
    return n;
  }
};

std::string official_vae_name(const std::string& name, const UpBlocks& up) {
  static const std::regex up_block(R"(decoder\.up_blocks\.(\d{1,4})\.(resnets\.(\d{1,4})|upsamplers\.0)\.(.+))");
  static const std::regex down_block(R"(encoder\.down_blocks\.(\d{1,4})\.(.+))");
  static const std::regex mid_block(R"((encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d)\.(.+))");
  static const std::map<std::string, std::string> whole = {{"quant_conv", "conv1"},
                                                           {"post_quant_conv", "conv2"},
                                                           {"encoder.conv_in", "encoder.conv1"},
                                                           {"decoder.conv_in", "decoder.conv1"},
                                                           {"encoder.norm_out", "encoder.head.0"},
                                                           {"decoder.norm_out", "decoder.head.0"},
                                                           {"encoder.conv_out", "encoder.head.2"},
                                                           {"decoder.conv_out", "decoder.head.2"}};
  const auto dot = name.rfind('.');
  if (dot != std::string::npos) {
    const auto it = whole.find(name.substr(0, dot));
    if (it != whole.end()) return it->second + name.substr(dot);
  }
  std::smatch m;
  if (std::regex_match(name, m, down_block))
    return "encoder.downsamples." + m[1].str() + "." + official_part(m[2].str());
  if (std::regex_match(name, m, mid_block)) {
    // resnets.0, attentions.0, resnets.1 -> middle.0, .1, .2
    const int64_t index = m[2].str() == "attentions" ? 1 : 2 * std::stoll(m[3].str());
    return m[1].str() + ".middle." + std::to_string(index) + "." + official_part(m[4].str());
  }
  if (std::regex_match(name, m, up_block)) {
    const int64_t block = int64_t(std::stoll(m[1].str()));
    const bool resnet = m[3].matched;
    const int64_t in_block = resnet ? std::stoll(m[3].str()) : (up.resnets.count(block) ? up.resnets.at(block) : 0);
    return "decoder.upsamples." + std::to_string(up.start(block) + in_block) + "." +
           (resnet ? official_part(m[4].str()) : m[4].str());
  }
  return name;  // not diffusers': the load names it if unexpected
}

// Wan2.2's VAE (AutoencoderKLWan with is_residual): each level is one
// block, its resnets then its resampler, as the official
// encoder.downsamples.I.downsamples.J and decoder.upsamples.I.upsamples.J
// (the resampler at J = the level's resnets); the rest as Wan2.1's.
bool is_residual_vae_name(const std::string& name) {
  // Wan2.1's encoder blocks are one flat list (no resnets), and its decoder's resampler is "upsamplers.0".
  static const std::regex level(
      R"((encoder\.down_blocks\.\d{1,4}\.(resnets|downsampler)|decoder\.up_blocks\.\d{1,4}\.upsampler)\..*)");
  return std::regex_match(name, level);
}

using ResnetsPerLevel = std::map<std::pair<std::string, int64_t>, int64_t>;  // (encoder|decoder, level) -> resnets

std::string official_vae22_name(const std::string& name, const ResnetsPerLevel& resnets) {
  static const std::regex level(
      R"((encoder|decoder)\.(down_blocks|up_blocks)\.(\d{1,4})\.(resnets\.(\d{1,4})|downsampler|upsampler)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, level)) return official_vae_name(name, UpBlocks{});  // the parts Wan2.1 shares
  const std::string part = m[1].str();
  const int64_t index = std::stoll(m[3].str());
  const std::string list = part == "encoder" ? "downsamples" : "upsamples";
  const bool resnet = m[5].matched;
  const auto count = resnets.find({part, index});
  const int64_t j = resnet ? std::stoll(m[5].str()) : (count == resnets.end() ? 0 : count->second);
  return fmt::format("{}.{}.{}.{}.{}.{}", part, list, index, list, j, resnet ? official_part(m[6].str()) : m[6].str());
}

}  // namespace

TensorSource open_vae_weights(const std::string& path) {
  TensorSource file = open_weights(path);
  if (std::none_of(file.shapes.begin(), file.shapes.end(),
                   [](const auto& item) { return is_diffusers_vae_name(item.first); }))
    return file;
  const bool residual = std::any_of(file.shapes.begin(), file.shapes.end(),
                                    [](const auto& item) { return is_residual_vae_name(item.first); });
  ResnetsPerLevel level_resnets;
  static const std::regex resnet_part(
      R"((encoder|decoder)\.(?:down_blocks|up_blocks)\.(\d{1,4})\.resnets\.(\d{1,4})\..+)");
  for (const auto& [name, shape] : file.shapes) {
    std::smatch m;
    if (!residual || !std::regex_match(name, m, resnet_part)) continue;
    auto& count = level_resnets[{m[1].str(), std::stoll(m[2].str())}];
    count = std::max<int64_t>(count, std::stoll(m[3].str()) + 1);
  }
  UpBlocks up;
  static const std::regex up_part(R"(decoder\.up_blocks\.(\d{1,4})\.(resnets\.(\d{1,4})|upsamplers\.0)\..+)");
  for (const auto& [name, shape] : file.shapes) {
    std::smatch m;
    if (!std::regex_match(name, m, up_part)) continue;
    const int64_t block = int64_t(std::stoll(m[1].str()));
    if (m[3].matched)
      up.resnets[block] = std::max<int64_t>(up.resnets[block], std::stoll(m[3].str()) + 1);
    else
      up.upsampler[block] = true;
  }
  TensorSource source;
  source.path = path;
  source.diffusers_names = true;
  for (const auto& [name, shape] : file.shapes) {
    const std::string official = residual ? official_vae22_name(name, level_resnets) : official_vae_name(name, up);
    if (!source.shapes.emplace(official, shape).second)
      throw UsageError(fmt::format("weights {}: tensors '{}' and '{}' both name parameter '{}'", path,
                                   source.stored_names.count(official) ? source.stored_names.at(official) : official,
                                   name, official));
    if (official != name) source.stored_names.emplace(official, name);
  }
  source.read = [read = file.read, names = source.stored_names](const std::string& name) {
    const auto it = names.find(name);
    return read(it == names.end() ? name : it->second);
  };
  return source;
}

}  // namespace wt::wan
