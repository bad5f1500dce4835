// The checkpoints of a run (fit's part): rank 0's background writer (every
// rank's with ZeRO's sharded state, the writers agreeing on each checkpoint
// over a communicator of their own), the save points, and what a checkpoint
// holds: the Engine's state and the run's position (epoch, sampler, the
// validation loss, the run's options and model config, the objective's
// state), assembled here and nowhere else.
//
// Rank 0 waits for its writer only at save points, on a stop and at the
// end, each time at most checkpoint_timeout, while the other ranks wait in
// a World agreement of that length (agree_after_writes): a slow write is
// never taken for a dead rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wantrain/train/fit.hpp"

namespace wt::ckpt {
class CheckpointWriter;
}
namespace wt::distributed {
class MpiComm;
}

namespace wt::train {

// Collective over the World: the maximum of `values` over the ranks. Rank 0
// may be waiting for its writer meanwhile, so the bound is the checkpoint
// timeout plus a margin in which rank 0's own abort reaches the others
// first (this bound only catches a rank 0 that vanished silently).
std::vector<int64_t> agree_after_writes(const distributed::World& world, const FitOptions& options,
                                        std::vector<int64_t> values,
                                        const std::string& what = "agreement after a checkpoint write");

class CheckpointSaver {
 public:
  // `last_saved`: the step whose checkpoint exists already (a resumed
  // run's), or -1. Every argument must outlive the saver.
  CheckpointSaver(const distributed::World& world, const FitOptions& options, const RunPlan& plan, Engine& engine,
                  const BatchSource& batches, RunRecord& record, double best_val_loss, int64_t last_saved);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective (at the same steps on every rank): rank 0 hands a checkpoint
  // of this step to its writer once the previous write finished; the others
  // wait for that. Nothing when this step is saved already.
  void save(int64_t epoch, double val_loss);
  // The writes finished since the last call, reported; false when one
  // failed and the options say the run stops on it. Not collective.
  bool take_results();
  // Collective: rank 0 drains its writer (bounded) and reports; true on
  // every rank when every write so far succeeded and `ok`.
  bool finish(bool ok);
  // Collective: as finish, but true only when every write succeeded,
  // whatever the error policy (what a stop's message must say).
  bool all_written();

 private:
  const distributed::World& world_;
  const FitOptions& options_;
  const RunPlan& plan_;
  Engine& engine_;
  const BatchSource& batches_;
  RunRecord& record_;
  int64_t last_saved_;
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  std::shared_ptr<distributed::MpiComm> writers_comm_;
};

}  // namespace wt::train
