#include "wantrain/wan/sample/cache_calibration.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "wantrain/util/error.hpp"
#include "wantrain/util/files.hpp"
#include "wantrain/util/json.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::wan {

namespace {

constexpr const char* kFormat = "wantrain step cache 1";
const char* const kBranchNames[2] = {"conditional", "unconditional"};

std::vector<std::string> key_list(const std::map<std::string, CacheCalibration>& models) {
  std::vector<std::string> keys;
  for (const auto& [name, _] : models) keys.push_back(name);
  return keys;
}

}  // namespace

CacheCalibration fit_calibration(const CacheRecord& record) {
  CacheCalibration c;
  std::vector<double> distinct(record.e0_change);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() < 5)
    throw UsageError(fmt::format(
        "a calibration needs at least 5 steps with a change of timestep to fit TeaCache's polynomial, got {}",
        distinct.size()));
  // Least squares of output_change on the powers of e0_change, highest first (numpy.polyfit's order).
  const auto x = torch::tensor(record.e0_change, torch::kFloat64);
  const auto y = torch::tensor(record.output_change, torch::kFloat64).unsqueeze(1);
  std::vector<at::Tensor> powers;
  for (int p = 4; p >= 0; --p) powers.push_back(x.pow(p));
  const auto a = torch::stack(powers, 1);  // [pairs, 5]
  // Columns scaled to unit norm (as polyfit does): the powers of a small change span many decades.
  const auto scale = a.norm(2, 0);
  const auto solution = std::get<0>(torch::linalg_lstsq(a / scale, y, std::nullopt, "gelsd")).squeeze(1) / scale;
  for (int64_t i = 0; i < 5; ++i) c.teacache.push_back(solution[i].item<double>());
  for (size_t b = 0; b < 2; ++b) {
    const auto& sum = record.ratio_sum[b];
    const auto& count = record.ratio_count[b];
    for (size_t s = 0; s < sum.size(); ++s) c.magcache[b].push_back(count[s] > 0 ? sum[s] / count[s] : 1.0);
  }
  return c;
}

void write_calibration_file(const std::string& path, const CacheCalibrationFile& file) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["steps"] = file.steps;
  j["solver"] = file.solver;
  j["shift"] = file.shift;
  j["cfg"] = file.cfg;
  j["samples"] = file.samples;
  j["loras"] = file.loras;
  for (const auto& [name, c] : file.models) {
    auto& m = j["models"][name];
    m["teacache"] = c.teacache;
    for (size_t b = 0; b < 2; ++b) m["magcache"][kBranchNames[b]] = c.magcache[b];
  }
  write_file_durably(path, j.dump(1) + "\n");
}

CacheCalibrationFile read_calibration_file(const std::string& path) {
  if (const auto why = unreadable_file_reason(path); !why.empty())
    throw UsageError(fmt::format("step cache calibration {}: {}", path, why));
  nlohmann::json j;
  try {
    j = parse_json(read_whole_file(path));
  } catch (const JsonError& e) {
    throw UsageError(fmt::format("step cache calibration {}: not JSON ({})", path, e.what()));
  }
  auto bad = [&](const std::string& key, const std::string& what) {
    return UsageError(fmt::format("step cache calibration {}: key \"{}\" {}", path, key, what));
  };
  if (!j.is_object() || j.value("format", nlohmann::json()) != kFormat)
    throw bad("format", fmt::format("is not \"{}\" (a file wansample --calibrate-cache writes)", kFormat));
  CacheCalibrationFile file;
  auto number = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number()) throw bad(key, "is missing or not a number");
    return j[key].get<double>();
  };
  file.steps = int(number("steps"));
  file.samples = int(number("samples"));
  file.shift = number("shift");
  file.cfg = number("cfg");
  if (file.steps < 1) throw bad("steps", "is not a number of steps");
  file.solver = j.value("solver", std::string());
  if (j.contains("loras") && j["loras"].is_array())
    for (const auto& l : j["loras"])
      if (l.is_string()) file.loras.push_back(l.get<std::string>());
  if (!j.contains("models") || !j["models"].is_object() || j["models"].empty())
    throw bad("models", "is missing or empty");
  auto numbers = [&](const nlohmann::json& v, const std::string& key, size_t expected) {
    if (!v.is_array() || (expected && v.size() != expected))
      throw bad(key, expected ? fmt::format("is not a list of {} numbers", expected) : "is not a list of numbers");
    std::vector<double> out;
    for (const auto& x : v) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) throw bad(key, "holds a value that is not a number");
      out.push_back(x.get<double>());
    }
    return out;
  };
  for (const auto& [name, m] : j["models"].items()) {
    if (name != "model" && name != "high_noise" && name != "low_noise")
      throw bad("models", fmt::format("names '{}' (model, high_noise or low_noise)", name));
    const std::string key = "models." + name;
    if (!m.is_object() || !m.contains("teacache") || !m.contains("magcache") || !m["magcache"].is_object())
      throw bad(key, "needs \"teacache\" and \"magcache\"");
    CacheCalibration c;
    c.source = path;
    c.teacache = numbers(m["teacache"], key + ".teacache", 5);
    for (size_t b = 0; b < 2; ++b) {
      const std::string branch_key = key + ".magcache." + kBranchNames[b];
      if (!m["magcache"].contains(kBranchNames[b])) throw bad(branch_key, "is missing");
      c.magcache[b] = numbers(m["magcache"][kBranchNames[b]], branch_key, size_t(file.steps));
    }
    file.models[name] = c;
  }
  return file;
}

std::string calibration_beside(const std::string& weights) {
  namespace fs = std::filesystem;
  const fs::path p(weights);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return (p / "step-cache.json").string();
  auto beside = p;
  return beside.replace_extension(".step-cache.json").string();
}

std::shared_ptr<const CacheCalibration> find_calibration(CacheMethod method, const std::string& given,
                                                         const std::string& weights, const WanConfig& config,
                                                         const std::string& role,
                                                         const std::vector<std::string>& loras) {
  const std::string beside = calibration_beside(weights);
  std::error_code ec;
  const std::string path = !given.empty() ? given : std::filesystem::exists(beside, ec) ? beside : std::string();
  if (!path.empty()) {
    const auto file = read_calibration_file(path);
    const auto it = file.models.find(role);
    if (it == file.models.end())
      throw SettingError("cache_calibration", fmt::format("{} calibrates {}, not the {} this sample uses", path,
                                                          fmt::join(key_list(file.models), " and "), role));
    report_info("step cache: {} with the calibration {}{} ({} sample{}, {} steps, {} shift {:g}, cfg {:g})",
                cache_method_name(method), path, role == "model" ? "" : " (" + role + ")", file.samples,
                file.samples == 1 ? "" : "s", file.steps, file.solver, file.shift, file.cfg);
    if (file.loras != loras)
      report_warning("{} was fitted with the LoRAs [{}], this sample has [{}]: calibrate again for the model as given",
                     path, fmt::join(file.loras, ", "), fmt::join(loras, ", "));
    return std::make_shared<const CacheCalibration>(it->second);
  }
  if (role == "model")
    if (auto published = published_calibration(config, weights)) {
      report_info("step cache: {} with {}; no calibration at {} (wansample {} makes one for the model as given)",
                  cache_method_name(method), published->source, beside, setting_reference("calibrate_cache"));
      return std::make_shared<const CacheCalibration>(std::move(*published));
    }
  throw SettingError("cache", fmt::format("{} needs a calibration of {}: there is none at {}, and {} has no published "
                                          "figures (Wan2.1 T2V-1.3B, T2V-14B and I2V-14B have); make one with "
                                          "wansample {} PROMPTS, or use easycache (no calibration)",
                                          cache_method_name(method), weights, beside,
                                          role == "model" ? "a model of this shape" : "an A14B expert",
                                          setting_reference("calibrate_cache")));
}

}  // namespace wt::wan
