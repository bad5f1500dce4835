// fit: the training loop of any model family, data-parallel over a Comm.
//
//   start_run   (collective) output directory, resume choice on rank 0,
//               the checkpoint read and checked on every rank
//   ... the app builds its model, objective, Engine and BatchSource, and
//       restores their state from the start point ...
//   fit         Engine steps over the BatchSource; validation every
//               val_every steps and at the end; checkpoints every
//               save_every steps on rank 0's background writer; the
//               metrics log; at every step boundary the ranks agree on a
//               stop signal (checkpoint, then the requeue status) and on a
//               failed write; samples every sample_every steps; at the end
//               the final checkpoint and weights; run.json however it ends.
//
// Returns the process exit status: kExitOk, kExitRequeue after a stop
// signal and its checkpoint, kExitFailure after a failed checkpoint write
// that the options say must stop the run.
//
// The caller installs the stop-signal handlers (util/stop_signals.hpp) for
// the process's whole life. fit answers a signal in each window: one during
// start-up (reading the resume checkpoint, loading a teacher, building the
// model) ends the run before the first step with kExitRequeue and nothing
// to save; one at a step boundary checkpoints and returns kExitRequeue; one
// while the final checkpoint is written lets it finish and returns
// kExitRequeue (the requeued run only writes the weights); one after fit
// returned is ignored.
//
// Rank 0 waits for its checkpoint writer only at save points, on a stop and
// at the end, each time at most checkpoint_timeout, while the other ranks
// wait in a World agreement: a slow write is never taken for a dead rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/ckpt/directory.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/run_record.hpp"
#include "wantrain/train/sample_handoff.hpp"
#include "wantrain/train/sample_source.hpp"
#include "wantrain/train/train_log.hpp"

namespace wt::distributed {
class Comm;
class World;
}  // namespace wt::distributed

namespace wt::train {

class Validator;
struct RunPlan;

struct FitOptions {
  std::string output_dir;
  int64_t save_every = 0;  // 0: only the final checkpoint
  int keep = 3;            // checkpoints kept; 0: all
  bool keep_best = false;  // also keep the lowest validation loss as `best`
  int64_t val_every = 0;   // 0: validate only at the end
  int log_every = 10;
  bool stop_on_checkpoint_error = true;  // false: warn and train on
  // Consecutive skipped (non-finite) steps after which the run stops with
  // kExitFailure: a run that can only skip learns nothing. 0: no limit.
  int64_t max_skipped = 20;
  // How long rank 0 may wait for a checkpoint write (the other ranks wait
  // with it in a World agreement of this length, not under the comm
  // timeout: a slow write is not a dead rank). Past it the job is ended.
  std::chrono::milliseconds checkpoint_timeout{std::chrono::hours(1)};
  std::string run_options;   // JSON, stored in checkpoints as information
  std::string model_config;  // JSON, stored in checkpoints; a resume checks it
  // ZeRO-1: every rank writes its shard of each checkpoint (beside rank 0's
  // main file), and a resume reads only the main file here (the Engine
  // reads its own slices of the optimizer state and EMA).
  bool sharded_state = false;
  bool tensorboard = true;   // TensorBoard event files in <output_dir>/tb
  int64_t sample_every = 0;  // FitRun::draw_sample (or hand_off) every N steps and after the last; 0 never
  RunIdentity identity;      // what run.json names
};

// Where a run starts: fresh, or from a checkpoint.
struct StartPoint {
  std::shared_ptr<ckpt::DirectoryLock> lock;  // rank 0: this job owns the output directory while it is held
  std::optional<ckpt::Checkpoint> checkpoint;
  std::string path;
  double best_val_loss = std::numeric_limits<double>::infinity();  // of the directory's `best`
};

// Collective. Creates the output directory and takes its lock (rank 0: one
// job per directory, held while the returned StartPoint lives); resolves `resume`
// ("" none, "auto" the directory's latest if any, or a path) on rank 0 and
// reads the chosen checkpoint on every rank, checking it was written for
// options.model_config (described as `model_config_name` in errors).
// Reports on rank 0 where the run starts (util/reporter.hpp).
StartPoint start_run(distributed::World& world, const FitOptions& options, const std::string& resume,
                     const std::string& model_config_name);

// Checks that `saved`'s sampler position fits this run's sampler (the same
// global batch; with shard affinity, the same world size and affinity) and
// restores `sampler` to it; UsageError naming the file otherwise.
void restore_sampler(const ckpt::Checkpoint& saved, const std::string& path, data::DistributedSampler& sampler);

// What fit drives, built by the app for its model family.
struct FitRun {
  Engine* engine = nullptr;  // over the objective being trained
  BatchSource* batches = nullptr;
  Validator* validator = nullptr;  // optional
  bool resumed = false;            // continues a checkpoint (metrics append, no re-save of its step)
  int64_t first_epoch = 0;         // a resumed run's epoch
  // At the end, on every rank (collective: a ZeRO run's EMA is gathered);
  // where `write` (rank 0) it writes the final weights into the output
  // directory and returns the line that names them.
  std::function<std::string(const std::string& directory, bool write)> save_weights;
  // Collective (with ZeRO the EMA is gathered); rank 0 draws a sample of the
  // model as trained so far, writes its PNG and returns what to log, the
  // other ranks return nothing. Needed with sample_every.
  std::function<std::optional<SampleReport>(int64_t step)> draw_sample;
  // Collective, before draw_sample (optional): every rank draws its share
  // of the prompts' videos with the same weights; fit gathers them to rank
  // 0's report.
  std::function<std::vector<SampleVideo>(int64_t step)> draw_videos;
  // With sample ranks of their own (train/sample_handoff.hpp), instead of
  // draw_sample: at a sample step, when the sample ranks are idle, every
  // rank takes part in gathering the weights to draw with
  // (Engine::each_sampling_weight: the model's groups, never a training-only
  // one) and rank 0's `sender` sends them; when they are still drawing, the sample is dropped with
  // one line. The last sample waits for them, at most checkpoint_timeout.
  struct SampleHandOff {
    SampleSender* sender = nullptr;  // rank 0's; nullptr on the others
    std::string base;                // the frozen weights they complete (a LoRA base's checksum; "" none)
  };
  std::optional<SampleHandOff> hand_off;
};

// `best_val_loss`: the start point's (what a new `best` must beat).
int fit(distributed::World& world, distributed::Comm& comm, const RunPlan& plan, FitRun run, const FitOptions& options,
        double best_val_loss);

}  // namespace wt::train
