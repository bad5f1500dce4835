// Step-cache calibrations (step_cache.hpp's CacheCalibration): fitted by
// wansample --calibrate-cache from the uncached sampler's record of a few
// prompts, written as JSON beside the weights and read from there, or the
// figures the TeaCache and MagCache authors published for Wan2.1's
// releases. docs/model.md, "Step caching", describes the file.
//
// The file (format "wantrain step cache 1"):
//   {"format": "wantrain step cache 1", "steps": 50, "solver": "unipc",
//    "shift": 5.0, "cfg": 5.0, "samples": 3, "loras": [],
//    "models": {"model": {"teacache": [a4, a3, a2, a1, a0],
//                         "magcache": {"conditional": [...], "unconditional": [...]}}}}
// with "high_noise" and "low_noise" instead of "model" for A14B's experts.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/sample/step_cache.hpp"

namespace wt::wan {

struct CacheCalibrationFile {
  int steps = 0, samples = 0;  // the samples it was fitted on
  std::string solver;
  double shift = 0, cfg = 0;
  std::vector<std::string> loras;
  std::map<std::string, CacheCalibration> models;  // "model", or "high_noise" and "low_noise"
};

// TeaCache's polynomial (degree 4, least squares over every recorded pair)
// and MagCache's curve (the mean ratio per branch and step over the
// prompts) from a calibration run's record. UsageError when the record is
// too short to fit (fewer than 5 pairs).
CacheCalibration fit_calibration(const CacheRecord& record);

void write_calibration_file(const std::string& path, const CacheCalibrationFile& file);
// UsageError naming the file and the key for anything it cannot use.
CacheCalibrationFile read_calibration_file(const std::string& path);

// Where a model's calibration sits beside its weights: a folder's
// step-cache.json; a file's name with .step-cache.json for its extension.
std::string calibration_beside(const std::string& weights);

// The published figures for a model of `config` whose weights are at
// `weights` (the folder's name tells Wan2.1-I2V-14B's 480P from its 720P,
// as the authors' scripts do): TeaCache's polynomial and MagCache's curve
// for Wan2.1 T2V-1.3B, T2V-14B, I2V-14B-480P and -720P. nullopt for any
// other architecture.
std::optional<CacheCalibration> published_calibration(const WanConfig& config, const std::string& weights);

// The calibration a method that needs one (TeaCache, MagCache) uses for the
// model `role` ("model", "high_noise", "low_noise") whose weights are at
// `weights`: the file `given`, else the one beside the weights, else the
// published figures (a model "model" of a released shape); which, reported.
// A file whose LoRAs differ from `loras` is used with a warning. SettingError
// naming the `cache` setting when there is none.
std::shared_ptr<const CacheCalibration> find_calibration(CacheMethod method, const std::string& given,
                                                         const std::string& weights, const WanConfig& config,
                                                         const std::string& role,
                                                         const std::vector<std::string>& loras);

}  // namespace wt::wan
