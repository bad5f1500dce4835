// The options every training tool shares (wantrain, csvfit): each declared
// once here, with its name, help, range check and mapping onto the library's
// typed settings (RunSettings, FitOptions). A tool declares the ones it
// takes where they belong in its --help (declare_training_options), adds
// its own, and starts its defaults from its own values of the fields.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "wantrain/train/fit.hpp"
#include "wantrain/train/run_plan.hpp"

namespace wt {
class OptionSet;
}

namespace wt::app {

struct TrainingOptions {
  std::string output_dir = "runs/wantrain";
  std::uint64_t seed = 0;
  bool dry_run = false;
  int log_every = 10;
  int threads = 0;     // 0: the node's cores shared among its ranks
  int batch_size = 1;  // per rank
  bool no_drop_last = false;
  std::int64_t val_every = 0;
  std::int64_t steps = 0;
  std::int64_t epochs = 0;
  double lr = 1e-4;
  double weight_decay = 0.01;
  std::string schedule = "constant";
  std::int64_t warmup_steps = 0;
  double clip = 1.0;
  double ema_decay = 0.0;
  int grad_accum = 1;
  std::int64_t save_every = 0;
  int keep = 3;
  std::string resume;
  std::string on_ckpt_error = "fail";
  double comm_timeout = 600.0;  // seconds
};

enum class TrainingOption {
  OutputDir,
  Seed,
  DryRun,
  LogEvery,
  Threads,
  BatchSize,
  NoDropLast,
  ValEvery,
  Steps,
  Epochs,
  Lr,
  WeightDecay,
  Schedule,
  WarmupSteps,
  Clip,
  EmaDecay,
  GradAccum,
  SaveEvery,
  Keep,
  Resume,
  OnCkptError,
  CommTimeout,
};

// Declares `which`, in that order, in `options`' current group; parse()
// fills `values`, whose fields at this call are the defaults.
void declare_training_options(OptionSet& options, TrainingOptions& values, std::initializer_list<TrainingOption> which);

// Range and cross-field checks of the shared options; UsageError naming the option.
void check_training_options(const TrainingOptions& values);

// The shared options as the library's settings; a tool sets the rest.
train::RunSettings run_settings(const TrainingOptions& values);
train::FitOptions fit_options(const TrainingOptions& values);
std::chrono::milliseconds comm_timeout(const TrainingOptions& values);

}  // namespace wt::app
