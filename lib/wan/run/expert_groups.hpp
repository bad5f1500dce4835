// Wan2.2 A14B's two experts trained in one job (setting `experts`): the
// job's ranks split into two groups, each a whole training run of its
// expert on its side of the boundary, in its own directory under the
// output directory (named as the release names the experts' folders), with
// OUTPUT_DIR/experts.json saying which groups trained what.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/run/train_settings.hpp"

namespace wt::wan {

struct ExpertGroup {
  std::string name;                   // "high" or "low"
  std::string folder;                 // "high_noise_model": its run directory under the output directory
  int first_rank = 0, ranks = 0;      // the job's ranks [first_rank, first_rank + ranks)
  double sigma_lo = 0, sigma_hi = 1;  // the sigma' (timestep / 1000) it trains on
};

struct ExpertLayout {
  double boundary = 0;              // sigma' from which the high-noise expert trains
  std::vector<ExpertGroup> groups;  // in the order of the setting

  // The group of the job's rank `rank`.
  const ExpertGroup& group_of(int rank) const;
  // One line per group, for the job's banner.
  std::string describe() const;
  // experts.json's text, and whether another layout's text is this one.
  std::string to_json() const;
};

// The groups of `settings.experts` on `job_ranks` ranks (the boundary's
// default from the model's type). Throws SettingError.
ExpertLayout expert_layout(const TrainSettings& settings, int job_ranks, const std::optional<WanConfig>& model);

// One group's run: its output directory, starting weights, timestep range,
// checkpoint to resume, and its record of the options it ran with.
TrainSettings expert_run_settings(const TrainSettings& settings, const ExpertGroup& group);

// Checks a resume against the experts.json of the run it resumes (the same
// experts on the same group sizes and boundary: each group's run continues
// exactly only on its own ranks), then writes this layout's (job rank 0
// only). Throws a UsageError naming the file or setting.
void record_expert_layout(const ExpertLayout& layout, const TrainSettings& settings, bool write);

}  // namespace wt::wan
