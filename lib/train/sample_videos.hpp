// The prompts' videos drawn during training come from every rank (each
// draws its share); rank 0 logs them all. This gathers them over MPI (World,
// not the gradient Comm: the ranks arrive after drawing work of uneven
// length, which the gradient Comm's watchdog would take for a hang).
#pragma once

#include <chrono>
#include <vector>

#include "wantrain/distributed/world.hpp"
#include "wantrain/train/train_log.hpp"

namespace wt::train {

// Collective: every rank's `mine`, on every rank, ordered by index; waits
// for the other ranks at most `bound`.
std::vector<SampleVideo> gather_sample_videos(const distributed::World& world, const std::vector<SampleVideo>& mine,
                                              std::chrono::milliseconds bound);

}  // namespace wt::train
