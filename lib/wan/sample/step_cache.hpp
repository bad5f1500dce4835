// Step caching: on a step whose block-stack output would barely change, the
// model skips its blocks and takes their input plus the residual (output
// minus input) of the last step it ran, per branch of guidance. Each method
// decides by its paper's rule, per branch, from what the branch saw:
//
//   TeaCache (Liu et al., CVPR 2025): the relative L1 change of the blocks'
//     time modulation e0 from the branch's previous step, rescaled by a
//     polynomial fitted per model, accumulated; skip while the sum stays
//     under the threshold, else run and reset it.
//   MagCache (Ma et al., 2025): a calibrated curve of the residual's
//     magnitude ratio from step to step; the product of the ratios since the
//     last run gives an error |1 - product|, accumulated; skip while the sum
//     stays under the threshold and at most K steps in a row, else run and
//     reset.
//   EasyCache (Zhou et al., 2025): no calibration; the transformation rate
//     k = |change of the output| / |change of the input| between the last
//     two runs; accumulate k * |change of the input| / |last output| each
//     step, skip while under the threshold, else run and reset.
//
// The first `keep_first` steps run always (TeaCache's and EasyCache's
// retention steps, MagCache's retention ratio), so do the last
// `keep_last`. Each model keeps its own states: Wan2.2 A14B's low-noise
// expert starts afresh at the switch. docs/model.md, "Step caching", has the
// defaults, the calibration and what each costs in quality.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/model/block_stack_cache.hpp"

namespace wt::wan {

enum class CacheMethod { None, TeaCache, MagCache, EasyCache };
const char* cache_method_name(CacheMethod method);  // "none", "teacache", ...
// SettingError naming the `cache` setting for any other name.
CacheMethod parse_cache_method(const std::string& name);

struct StepCacheSettings {
  CacheMethod method = CacheMethod::None;
  // Unset: the method's default (cache_defaults).
  std::optional<double> threshold;
  std::optional<int> keep_first;  // steps run first, whatever the rule
  std::optional<int> max_skips;   // steps a branch skips in a row at most (0: no limit)
};

struct CacheRules {
  double threshold = 0;
  int keep_first = 0, keep_last = 0, max_skips = 0;
};
// The papers' defaults for a sample of `steps` steps: TeaCache 0.1 with 5
// retention steps (its Wan2.1 use_ret_steps), MagCache 0.12 with K = 2 and
// the first 20% of the steps kept, EasyCache 0.05 with 10 steps kept first
// and the last one run; `settings` overrides. SettingError naming the
// setting for a negative threshold, keep_first or max_skips.
CacheRules cache_rules(const StepCacheSettings& settings, int steps);

// What a model's calibration gives the methods that need one
// (cache_calibration.hpp fits and reads it).
struct CacheCalibration {
  std::string source;  // the file, or the publication the figures come from
  // TeaCache: the polynomial from the relative L1 change of e0 to that of
  // the blocks' output, highest power first (numpy.poly1d's order).
  std::vector<double> teacache;
  // MagCache: per branch (0 conditional, 1 unconditional), per step of a
  // `steps`-step sample, the ratio of the residual's magnitude to the
  // previous step's (1 at the first step).
  std::array<std::vector<double>, 2> magcache;
  // The ratio at `step` of a sample of `steps` steps: the calibration's own,
  // or its nearest (MagCache's nearest_interp) when the counts differ.
  double mag_ratio(int branch, int step, int steps) const;
};

// The pure decisions, one object per branch (step_cache_test.cpp holds them
// to a reference written from the papers' equations).
struct TeaCacheRule {
  double accumulated = 0;
  // `kept`: a retained step (runs, the sum starts again); else the rescaled change is added.
  bool skip(bool kept, double relative_change, const std::vector<double>& polynomial, const CacheRules& rules);
};
struct MagCacheRule {
  double ratio = 1, error = 0;
  int steps = 0;
  bool skip(bool kept, double mag_ratio, const CacheRules& rules);
};
struct EasyCacheRule {
  double accumulated = 0;
  std::optional<double> rate;  // k, once two runs were seen
  bool skip(bool kept, double input_change, double last_output_mean, const CacheRules& rules);
};
// Counts a branch's skips in a row for max_skips: whether `skip` may stand.
bool within_max_skips(bool skip, int& in_a_row, const CacheRules& rules);

// What a calibration run records per model, per branch, per step (the
// uncached sampler: nothing skipped).
struct CacheRecord {
  // TeaCache's pairs: the relative L1 change of e0 and of the blocks' output
  // from the branch's previous step.
  std::vector<double> e0_change, output_change;
  // MagCache: per branch, per step, the summed magnitude ratios over the
  // prompts recorded (and how many), 0 where the step was not this model's.
  std::array<std::vector<double>, 2> ratio_sum;
  std::array<std::vector<int>, 2> ratio_count;
};

struct CacheCounts {
  int64_t ran = 0, skipped = 0;  // forwards of the block stack, over every draw
};

// The step caching of a sampling job: the settings and each model's
// calibration, fresh states for every draw, the counts over all of them.
// Or, built by calibrating(), a recorder that skips nothing.
class StepCaching {
 public:
  // `low` for the one model or A14B's low-noise expert, `high` for the
  // high-noise expert: their calibrations (nullptr: the method needs none).
  StepCaching(StepCacheSettings settings, std::shared_ptr<const CacheCalibration> low,
              std::shared_ptr<const CacheCalibration> high = nullptr);
  static std::unique_ptr<StepCaching> calibrating();
  ~StepCaching();

  // A draw of `steps` steps whose first `high_steps` are the high-noise expert's.
  void begin_draw(int steps, int high_steps);
  // The cache for a branch's forwards of the draw's current model.
  BlockStackCache* branch(bool high, bool conditional);

  const StepCacheSettings& settings() const { return settings_; }
  const CacheCounts& counts() const { return counts_; }
  bool recording() const { return recording_; }
  // Calibrating: what the draws recorded, for the high-noise expert or the other model.
  const CacheRecord& record(bool high) const { return records_[high ? 1 : 0]; }
  // "teacache (threshold 0.1, 5 steps kept first, ...)".
  std::string describe(int steps) const;

 private:
  class Branch;
  StepCacheSettings settings_;
  std::array<std::shared_ptr<const CacheCalibration>, 2> calibrations_;  // [low, high]
  bool recording_ = false;
  std::array<CacheRecord, 2> records_;
  std::vector<std::unique_ptr<Branch>> branches_;  // [model * 2 + branch]
  CacheCounts counts_;
};

}  // namespace wt::wan
