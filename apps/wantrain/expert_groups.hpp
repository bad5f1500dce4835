// Wan2.2 A14B's two experts trained in one job (wantrain --experts high,low):
// the job's ranks split into two groups, each a whole training run of its
// expert on its side of the boundary, in its own directory under
// --output-dir (named as the release names the experts' folders), with
// OUTPUT_DIR/experts.json saying which groups trained what.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train_config.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wantrain {

struct ExpertGroup {
  std::string name;                   // "high" or "low"
  std::string folder;                 // "high_noise_model": its run directory under --output-dir
  int first_rank = 0, ranks = 0;      // the job's ranks [first_rank, first_rank + ranks)
  double sigma_lo = 0, sigma_hi = 1;  // the sigma' (timestep / 1000) it trains on
};

struct ExpertLayout {
  double boundary = 0;              // sigma' from which the high-noise expert trains
  std::vector<ExpertGroup> groups;  // in the order of --experts

  // The group of the job's rank `rank`.
  const ExpertGroup& group_of(int rank) const;
  // One line per group, for the job's banner.
  std::string describe() const;
  // experts.json's text, and whether another layout's text is this one.
  std::string to_json() const;
};

// The groups of --experts on `job_ranks` ranks (the boundary's default from
// the model's type). Throws UsageError naming the option.
ExpertLayout expert_layout(const TrainConfig& cfg, int job_ranks, const std::optional<wan::WanConfig>& model);

// --experts' options alone (called by validate()): throws UsageError.
void check_expert_options(const TrainConfig& cfg);

// One group's run: its output directory, starting weights, timestep range
// and checkpoint to resume.
TrainConfig expert_run_config(const TrainConfig& cfg, const ExpertGroup& group);

// Checks a resume against the experts.json of the run it resumes (the same
// experts on the same group sizes and boundary: each group's run continues
// exactly only on its own ranks), then writes this layout's (job rank 0
// only). Throws UsageError naming the file.
void record_expert_layout(const ExpertLayout& layout, const TrainConfig& cfg, bool write);

}  // namespace wt::wantrain
