#include "wantrain/wan/vae/vae_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"

namespace wt::wan {

int64_t VaeConfig::spatial_factor() const { return int64_t(1) << (dim_mult.empty() ? 0 : dim_mult.size() - 1); }

int64_t VaeConfig::temporal_factor() const {
  return int64_t(1) << std::count(temperal_downsample.begin(), temperal_downsample.end(), true);
}

void check_vae_config(const VaeConfig& c, const std::string& source) {
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"dim", c.dim}, {"z_dim", c.z_dim}, {"num_res_blocks", c.num_res_blocks}})
    if (value < 1 || value > (1 << 16))
      throw UsageError(fmt::format("{}: \"{}\" must be a positive integer", source, key));
  // The official decoder halves the channels of levels 1 to 3 only: more
  // than four levels would not run there.
  if (c.dim_mult.empty() || c.dim_mult.size() > 4 ||
      std::any_of(c.dim_mult.begin(), c.dim_mult.end(), [](int64_t m) { return m < 1 || m > (1 << 10); }))
    throw UsageError(fmt::format("{}: \"dim_mult\" must be 1 to 4 positive integers", source));
  if (c.temperal_downsample.size() + 1 != c.dim_mult.size())
    throw UsageError(fmt::format("{}: \"temperal_downsample\" must have one entry per level but the last ({}), not {}",
                                 source, c.dim_mult.size() - 1, c.temperal_downsample.size()));
  // Video goes in as chunks of 4 frames, which two halvings take to one
  // frame; a third would have none left.
  if (std::count(c.temperal_downsample.begin(), c.temperal_downsample.end(), true) > 2)
    throw UsageError(fmt::format("{}: \"temperal_downsample\" may halve time at most twice", source));
  if (std::any_of(c.attn_scales.begin(), c.attn_scales.end(), [](double s) { return !(s > 0) || !std::isfinite(s); }))
    throw UsageError(fmt::format("{}: \"attn_scales\" must be positive numbers", source));
  for (const auto& [key, values] : {std::pair<const char*, const std::vector<double>*>{"latents_mean", &c.latents_mean},
                                    {"latents_std", &c.latents_std}}) {
    if (int64_t(values->size()) != c.z_dim)
      throw UsageError(
          fmt::format("{}: \"{}\" must have z_dim ({}) numbers, not {}", source, key, c.z_dim, values->size()));
    if (std::any_of(values->begin(), values->end(), [](double v) { return !std::isfinite(v); }))
      throw UsageError(fmt::format("{}: \"{}\" must be finite numbers", source, key));
  }
  if (std::any_of(c.latents_std.begin(), c.latents_std.end(), [](double v) { return !(v > 0); }))
    throw UsageError(fmt::format("{}: \"latents_std\" must be positive", source));
}

VaeConfig parse_vae_config(const std::string& json_text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = parse_json(json_text);
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object of VAE settings", source));
  static const std::set<std::string> known = {
      "dim",          "z_dim",       "dim_mult", "num_res_blocks", "attn_scales", "temperal_downsample",
      "latents_mean", "latents_std", "dropout"};
  for (const auto& [key, value] : doc.items())
    if (!known.count(key)) throw UsageError(fmt::format("{}: unknown key \"{}\"", source, key));

  VaeConfig c;
  const auto integer = [&](const char* key, int64_t& field) {
    if (!doc.contains(key)) return;
    if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < 1 || doc[key].get<int64_t>() > (1 << 16))
      throw UsageError(fmt::format("{}: \"{}\" must be a positive integer", source, key));
    field = doc[key].get<int64_t>();
  };
  const auto array = [&](const char* key, const char* what) -> const nlohmann::json* {
    if (!doc.contains(key)) return nullptr;
    if (!doc[key].is_array()) throw UsageError(fmt::format("{}: \"{}\" must be a list of {}", source, key, what));
    return &doc[key];
  };
  const auto numbers = [&](const char* key, std::vector<double>& field) {
    const auto* list = array(key, "numbers");
    if (!list) return false;
    field.clear();
    for (const auto& v : *list) {
      if (!v.is_number()) throw UsageError(fmt::format("{}: \"{}\" must be a list of numbers", source, key));
      field.push_back(v.get<double>());
    }
    return true;
  };
  integer("dim", c.dim);
  integer("z_dim", c.z_dim);
  integer("num_res_blocks", c.num_res_blocks);
  if (const auto* list = array("dim_mult", "positive integers")) {
    c.dim_mult.clear();
    for (const auto& v : *list) {
      if (!v.is_number_integer())
        throw UsageError(fmt::format("{}: \"dim_mult\" must be 1 to 4 positive integers", source));
      c.dim_mult.push_back(v.get<int64_t>());
    }
  }
  if (const auto* list = array("temperal_downsample", "true or false")) {
    c.temperal_downsample.clear();
    for (const auto& v : *list) {
      if (!v.is_boolean())
        throw UsageError(fmt::format("{}: \"temperal_downsample\" must be a list of true or false", source));
      c.temperal_downsample.push_back(v.get<bool>());
    }
  }
  numbers("attn_scales", c.attn_scales);
  // Wan2.1's statistics belong to its 16 channels; another latent space
  // without its own is left as it is (mean 0, std 1).
  if (!numbers("latents_mean", c.latents_mean) && c.z_dim != 16) c.latents_mean.assign(c.z_dim, 0.0);
  if (!numbers("latents_std", c.latents_std) && c.z_dim != 16) c.latents_std.assign(c.z_dim, 1.0);
  if (doc.contains("dropout") &&
      (!doc["dropout"].is_number() || !(doc["dropout"].get<double>() >= 0) || !(doc["dropout"].get<double>() < 1)))
    throw UsageError(fmt::format("{}: \"dropout\" must be a number in [0, 1)", source));
  check_vae_config(c, source);
  return c;
}

VaeConfig load_vae_config(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty()) throw UsageError(fmt::format("{}: {}", path, why));
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_vae_config(text.str(), path);
}

}  // namespace wt::wan
