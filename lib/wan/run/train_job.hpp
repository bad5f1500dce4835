// A whole wantrain job from its typed settings (train_settings.hpp): the
// start-up checks, the plan and its banner, the model run built and fitted
// (train/fit.hpp); or, with experts, two rank groups each training its
// expert (expert_groups.hpp); or, with sample ranks, the job's last ranks
// drawing the samples (sample_ranks.hpp) while the others train.
//
//   settings -> checks (data, model, teacher, ranks) -> RunPlan and memory
//   plan -> banner -> WanRun (its ModelRecipe) -> train::fit -> outputs
#pragma once

#include <functional>
#include <string>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/train/run_record.hpp"
#include "wantrain/wan/run/train_settings.hpp"

namespace wt::wan {

// What only the tool knows: its options as the banner shows them, how
// run.json names what ran, and its log's prefix for a rank group.
struct TrainJobTool {
  // The banner's first lines: the tool, its version and its options as resolved.
  std::string resolved_options;
  // Collective: what run.json says ran (the tool, its command line, the world).
  std::function<train::RunIdentity(const distributed::World&, const distributed::Comm&)> identity;
  // This rank now works in a group of the job ("high", "sample"), as rank
  // group_rank of group_size; a log prefixes its lines so.
  std::function<void(int job_rank, int job_size, const std::string& group, int group_rank, int group_size)> enter_group;
};

// Collective over `world` (the job): runs it to its end. Returns the exit
// status (util/exit_codes.hpp): 0, 75 for a stop that saved its run, or a
// failure's; a UsageError names the setting (SettingError) or the file.
int run_training_job(distributed::World& world, const TrainSettings& settings, const TrainJobTool& tool);

}  // namespace wt::wan
