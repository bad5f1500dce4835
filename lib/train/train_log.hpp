// What a training run reports, on rank 0 only: a progress bar when stdout is
// a terminal a person watches (not under SLURM), else one log line every
// --log-every steps; one JSON object per logged step in
// <output-dir>/metrics.jsonl; and the same figures as TensorBoard scalars in
// <output-dir>/tb/ (report/tensorboard_writer.hpp). A logged step reports
// the means over the steps since the previous one (loss, step time and its
// split), the latest lr, gradient norm and loss scale, and each rank's peak
// memory so far.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wantrain/report/tensorboard_writer.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/validation.hpp"
#include "wantrain/util/progress.hpp"

namespace wt::train {

struct TrainLogOptions {
  std::string metrics_path;     // <output-dir>/metrics.jsonl
  std::string tensorboard_dir;  // <output-dir>/tb; empty: no event files
  bool append = false;          // continue the files of a resumed run
  int log_every = 10;
  int64_t total_steps = 0;
  int64_t first_step = 0;        // steps already taken (a resumed run)
  int64_t samples_per_step = 1;  // the effective batch
  std::FILE* stream = stdout;    // the progress bar's; nullptr: none (a log of samples drawn elsewhere)
};

// Each rank's peak memory so far, in MiB, by rank (collected by fit).
struct MemoryPeaks {
  std::vector<double> rss_mib;
  std::vector<double> device_mib;  // GPU runs only: the most device memory seen in use
};

// A video of a prompt drawn during training (wan/sample/prompt_videos.hpp).
struct SampleVideo {
  int64_t index = 0;    // the prompt's, in its file's order
  std::string prompt;   // its text
  std::string path;     // samples/step-N/NN.mp4 (empty: not written)
  report::Image strip;  // some of its frames side by side, for TensorBoard
  double seconds = 0;   // what drawing and writing it cost
  int rank = 0;         // that drew it
};

// A sample drawn during training (wan/run/training_sample.hpp).
struct SampleReport {
  int64_t index = 0;       // of the training sample whose prompt it was drawn for
  double correlation = 0;  // against that sample's latents
  double mse = 0;
  double seconds = 0;               // what drawing it cost
  std::string png_path;             // samples/step-N.png
  report::Image image;              // the same PNG, for TensorBoard
  std::vector<SampleVideo> videos;  // the prompts' videos (every rank's), by index
};

class TrainLog {
 public:
  // `enabled` is true on rank 0 only; elsewhere every call does nothing.
  TrainLog(bool enabled, TrainLogOptions options);
  ~TrainLog();

  // `peaks` at logged steps (is_logged_step), empty otherwise.
  void record(const StepResult& step, int64_t skipped_total, const MemoryPeaks& peaks);
  // The overall loss, and each bucket's when the validation data hold several.
  void validation(int64_t step, const ValidationResult& result);
  void sample(int64_t step, const SampleReport& sample);
  // The closing line: steps, mean samples/s, skipped steps, wall time and
  // each rank's peak memory; also a last metrics.jsonl line.
  void finish(int64_t skipped_total, const MemoryPeaks& peaks);

  // The same answer on every rank: fit collects memory peaks at these.
  bool is_logged_step(int64_t step) const;

  // The whole run so far (rank 0): steps, their wall time, the last logged loss.
  int64_t run_steps() const { return run_steps_; }
  double run_seconds() const { return run_wall_; }
  double last_loss() const { return last_loss_; }

 private:
  void write_line(const std::string& json);
  void to_tensorboard(const std::function<void()>& write);
  void line(const std::string& text);  // one log line (keeps a progress bar's line intact)

  const bool enabled_;
  const TrainLogOptions options_;
  std::ofstream metrics_;
  std::unique_ptr<report::TensorBoardWriter> tensorboard_;
  std::unique_ptr<Progress> progress_;
  // Since the last logged step:
  int64_t steps_ = 0;
  double loss_sum_ = 0, wall_ = 0;
  StepTimes times_;
  // Whole run:
  int64_t run_steps_ = 0;
  double run_wall_ = 0;
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace wt::train
