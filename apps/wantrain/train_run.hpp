// The training or distillation run of `wantrain`: the Trainer's steps with rank-0 logging,
// validation every --val-every steps and at the end, then the final weights.
#pragma once

#include <optional>
#include <string>

#include "wantrain/data/dataset.hpp"
#include "wantrain/model/model_config.hpp"
#include "wantrain/train/train_config.hpp"

namespace wt::distributed {
class Comm;
class World;
}  // namespace wt::distributed
namespace wt {

// Returns the process exit status: kExitOk, or kExitRequeue after a stop
// signal and its checkpoint. `run_config` (JSON) goes into checkpoints.
// `teacher_config` is set for --mode distill.
int run_training(distributed::World& world, distributed::Comm& comm, const TrainConfig& cfg, data::Dataset dataset,
                 const model::WanConfig& model_config, const std::optional<model::WanConfig>& teacher_config,
                 const std::string& run_config);

}  // namespace wt
