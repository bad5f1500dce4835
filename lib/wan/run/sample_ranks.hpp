// Samples on ranks of their own (setting `sample_ranks` = K): the job's
// last K ranks never train. The training ranks (or both expert groups) send
// them the weights to draw with at each sample step when they are idle, and
// train on; the sample ranks draw the training sample's PNG and the prompt
// file's videos (sample_group.hpp), into the run's samples/ folder, with a
// log of their own.
#pragma once

#include <vector>

#include "wantrain/distributed/world.hpp"
#include "wantrain/train/sample_handoff.hpp"
#include "wantrain/wan/run/expert_groups.hpp"
#include "wantrain/wan/run/train_settings.hpp"

namespace wt::wan {

// The dtype the sample ranks hold the blocks' Linear weights in: as
// autocast computes with them (bf16 under a bf16 compute dtype: a 14B
// expert in 28 GB, as wansample holds a released model), a LoRA base as
// trained, a VACE branch's base (trained alone) in fp32 as trained.
at::ScalarType sample_rank_linear_dtype(const TrainSettings& settings);

// Where a training group's rank 0 sends its weights.
struct SampleRanks {
  const train::SampleChannel& channel;
  int first_rank = 0, ranks = 0;  // the sample ranks: job ranks [first_rank, first_rank + ranks)
};

// The sample ranks' whole run, on their group `group` of the job: their
// start-up (data, model config, prompts, the models of the sources as the
// training ranks build them) and the sample loop, until every source is
// done. `experts`: the expert groups (each a source), or nullptr for one
// training group whose rank 0 is job rank 0. Returns the training's status.
int run_sample_ranks(const distributed::World& group, const TrainSettings& settings, const SampleRanks& samples,
                     const ExpertLayout* experts);

}  // namespace wt::wan
