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

namespace {

nlohmann::json parse_object(const std::string& json_text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = parse_json(json_text);
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  if (!doc.is_object()) throw UsageError(fmt::format("{}: not a JSON object of VAE settings", source));
  return doc;
}

// The keys both VAEs' files share, read into their fields; UsageError
// naming the source and key.
struct Fields {
  const nlohmann::json& doc;
  const std::string& source;

  void only(const std::set<std::string>& known) const {
    for (const auto& [key, value] : doc.items())
      if (!known.count(key)) throw UsageError(fmt::format("{}: unknown key \"{}\"", source, key));
  }
  void integer(const char* key, int64_t& field) const {
    if (!doc.contains(key)) return;
    if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < 1 || doc[key].get<int64_t>() > (1 << 16))
      throw UsageError(fmt::format("{}: \"{}\" must be a positive integer", source, key));
    field = doc[key].get<int64_t>();
  }
  const nlohmann::json* array(const char* key, const char* what) const {
    if (!doc.contains(key)) return nullptr;
    if (!doc[key].is_array()) throw UsageError(fmt::format("{}: \"{}\" must be a list of {}", source, key, what));
    return &doc[key];
  }
  bool numbers(const char* key, std::vector<double>& field) const {
    const auto* list = array(key, "numbers");
    if (!list) return false;
    field.clear();
    for (const auto& v : *list) {
      if (!v.is_number()) throw UsageError(fmt::format("{}: \"{}\" must be a list of numbers", source, key));
      field.push_back(v.get<double>());
    }
    return true;
  }
  void levels(std::vector<int64_t>& dim_mult, std::vector<bool>& temperal_downsample) const {
    if (const auto* list = array("dim_mult", "positive integers")) {
      dim_mult.clear();
      for (const auto& v : *list) {
        if (!v.is_number_integer())
          throw UsageError(fmt::format("{}: \"dim_mult\" must be 1 to 4 positive integers", source));
        dim_mult.push_back(v.get<int64_t>());
      }
    }
    if (const auto* list = array("temperal_downsample", "true or false")) {
      temperal_downsample.clear();
      for (const auto& v : *list) {
        if (!v.is_boolean())
          throw UsageError(fmt::format("{}: \"temperal_downsample\" must be a list of true or false", source));
        temperal_downsample.push_back(v.get<bool>());
      }
    }
  }
  // A VAE's statistics belong to its own channels: without them in the
  // file, another z_dim than the default's is left as it is (mean 0, std 1).
  void statistics(int64_t z_dim, int64_t default_z_dim, std::vector<double>& mean, std::vector<double>& std) const {
    if (!numbers("latents_mean", mean) && z_dim != default_z_dim) mean.assign(size_t(z_dim), 0.0);
    if (!numbers("latents_std", std) && z_dim != default_z_dim) std.assign(size_t(z_dim), 1.0);
  }
  void dropout() const {
    if (doc.contains("dropout") &&
        (!doc["dropout"].is_number() || !(doc["dropout"].get<double>() >= 0) || !(doc["dropout"].get<double>() < 1)))
      throw UsageError(fmt::format("{}: \"dropout\" must be a number in [0, 1)", source));
  }
  // The "version" the file names, if any.
  std::optional<VaeVersion> version() const {
    if (!doc.contains("version")) return std::nullopt;
    const auto& v = doc["version"];
    if (v.is_string() && v.get<std::string>() == "2.1") return VaeVersion::Wan21;
    if (v.is_string() && v.get<std::string>() == "2.2") return VaeVersion::Wan22;
    throw UsageError(fmt::format("{}: \"version\" must be \"2.1\" or \"2.2\"", source));
  }
  void expect_version(VaeVersion wanted) const {
    const auto named = version();
    if (named && *named != wanted)
      throw UsageError(fmt::format("{}: describes the {} VAE (\"version\"), not the {} VAE", source,
                                   vae_version_name(*named), vae_version_name(wanted)));
  }
};

}  // namespace

VaeConfig parse_vae_config(const std::string& json_text, const std::string& source) {
  const auto doc = parse_object(json_text, source);
  const Fields fields{doc, source};
  fields.only({"dim", "z_dim", "dim_mult", "num_res_blocks", "attn_scales", "temperal_downsample", "latents_mean",
               "latents_std", "dropout", "version"});
  fields.expect_version(VaeVersion::Wan21);
  VaeConfig c;
  fields.integer("dim", c.dim);
  fields.integer("z_dim", c.z_dim);
  fields.integer("num_res_blocks", c.num_res_blocks);
  fields.levels(c.dim_mult, c.temperal_downsample);
  fields.numbers("attn_scales", c.attn_scales);
  fields.statistics(c.z_dim, 16, c.latents_mean, c.latents_std);
  fields.dropout();
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

int64_t Vae22Config::spatial_factor() const { return int64_t(2) << (dim_mult.empty() ? 0 : dim_mult.size() - 1); }

int64_t Vae22Config::temporal_factor() const {
  return int64_t(1) << std::count(temperal_downsample.begin(), temperal_downsample.end(), true);
}

void check_vae22_config(const Vae22Config& c, const std::string& source) {
  // The checks Wan2.1's config shares, on its fields.
  VaeConfig shared;
  shared.dim = c.dim;
  shared.z_dim = c.z_dim;
  shared.dim_mult = c.dim_mult;
  shared.num_res_blocks = c.num_res_blocks;
  shared.temperal_downsample = c.temperal_downsample;
  shared.latents_mean = c.latents_mean;
  shared.latents_std = c.latents_std;
  check_vae_config(shared, source);
  if (c.dec_dim < 1 || c.dec_dim > (1 << 16))
    throw UsageError(fmt::format("{}: \"dec_dim\" must be a positive integer", source));
  // Level i of n: 2x2 down (up) but the last, time too where
  // temperal_downsample says (the decoder reads the list reversed).
  const size_t n = c.dim_mult.size();
  const auto time = [&](bool halves) { return halves ? int64_t(2) : int64_t(1); };
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = c.dim * (i == 0 ? 1 : c.dim_mult[i - 1]), out = c.dim * c.dim_mult[i];
    const int64_t values = in * (i + 1 < n ? 4 * time(c.temperal_downsample[i]) : 1);
    if (values % out != 0)
      throw UsageError(fmt::format(
          "{}: \"dim_mult\": encoder level {} ({} -> {} channels) averages {} values a position into {} channels, "
          "which do not divide them",
          source, i, in, out, values, out));
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    const int64_t in = c.dec_dim * c.dim_mult[i == 0 ? n - 1 : n - i], out = c.dec_dim * c.dim_mult[n - 1 - i];
    const int64_t values = out * 4 * time(c.temperal_downsample[n - 2 - i]);
    if (values % in != 0)
      throw UsageError(fmt::format(
          "{}: \"dim_mult\": decoder level {} ({} -> {} channels) spreads {} channels over {} values a position, "
          "which they do not divide",
          source, i, in, out, in, values));
  }
}

Vae22Config parse_vae22_config(const std::string& json_text, const std::string& source) {
  const auto doc = parse_object(json_text, source);
  const Fields fields{doc, source};
  fields.only({"dim", "dec_dim", "z_dim", "dim_mult", "num_res_blocks", "attn_scales", "temperal_downsample",
               "latents_mean", "latents_std", "dropout", "version"});
  fields.expect_version(VaeVersion::Wan22);
  Vae22Config c;
  fields.integer("dim", c.dim);
  fields.integer("dec_dim", c.dec_dim);
  fields.integer("z_dim", c.z_dim);
  fields.integer("num_res_blocks", c.num_res_blocks);
  fields.levels(c.dim_mult, c.temperal_downsample);
  std::vector<double> attn_scales;
  if (fields.numbers("attn_scales", attn_scales) && !attn_scales.empty())
    throw UsageError(fmt::format(
        "{}: \"attn_scales\" must be empty for the Wan2.2 VAE (the official one takes the key and builds no "
        "attention from it)",
        source));
  fields.statistics(c.z_dim, 48, c.latents_mean, c.latents_std);
  fields.dropout();
  check_vae22_config(c, source);
  return c;
}

const char* vae_version_name(VaeVersion version) { return version == VaeVersion::Wan22 ? "Wan2.2" : "Wan2.1"; }

int64_t VideoVaeConfig::z_dim() const { return version == VaeVersion::Wan22 ? wan22.z_dim : wan21.z_dim; }
int64_t VideoVaeConfig::spatial_factor() const {
  return version == VaeVersion::Wan22 ? wan22.spatial_factor() : wan21.spatial_factor();
}
int64_t VideoVaeConfig::temporal_factor() const {
  return version == VaeVersion::Wan22 ? wan22.temporal_factor() : wan21.temporal_factor();
}
std::string VideoVaeConfig::description() const {
  return fmt::format("{} VAE ({} channels, {}x{}x{})", vae_version_name(version), z_dim(), temporal_factor(),
                     spatial_factor(), spatial_factor());
}

VideoVaeConfig parse_video_vae_config(const std::string& json_text, const std::string& source,
                                      std::optional<VaeVersion> weights, const std::string& weights_source) {
  const auto doc = parse_object(json_text, source);
  const auto named = Fields{doc, source}.version();
  VideoVaeConfig c;
  c.version = named ? *named : doc.contains("dec_dim") ? VaeVersion::Wan22 : weights.value_or(VaeVersion::Wan21);
  if (weights && c.version != *weights)
    throw UsageError(fmt::format("{}: describes the {} VAE ({}), and {} hold the {} VAE", source,
                                 vae_version_name(c.version), named ? "its \"version\"" : "it has \"dec_dim\"",
                                 weights_source, vae_version_name(*weights)));
  if (c.version == VaeVersion::Wan22)
    c.wan22 = parse_vae22_config(json_text, source);
  else
    c.wan21 = parse_vae_config(json_text, source);
  return c;
}

VideoVaeConfig load_video_vae_config(const std::string& path, std::optional<VaeVersion> weights,
                                     const std::string& weights_source) {
  if (const auto why = unreadable_file_reason(path); !why.empty()) throw UsageError(fmt::format("{}: {}", path, why));
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_video_vae_config(text.str(), path, weights, weights_source);
}

}  // namespace wt::wan
