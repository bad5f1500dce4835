// What a training run reports, on rank 0 only: a progress bar when stdout is
// a terminal, else one line every --log-every steps (SLURM log files), and
// one JSON object per logged step in <output-dir>/metrics.jsonl. A logged
// step reports the means over the steps since the previous one (loss, step
// time and its split) and the latest lr and gradient norm.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "wantrain/train/engine.hpp"
#include "wantrain/util/progress.hpp"

namespace wt::train {

struct TrainLogOptions {
  std::string metrics_path;  // <output-dir>/metrics.jsonl
  bool append = false;       // continue the file of a resumed run
  int log_every = 10;
  int64_t total_steps = 0;
  int64_t first_step = 0;        // steps already taken (a resumed run)
  int64_t samples_per_step = 1;  // the effective batch
  std::FILE* stream = stdout;
};

class TrainLog {
 public:
  // `enabled` is true on rank 0 only; elsewhere every call does nothing.
  TrainLog(bool enabled, TrainLogOptions options);
  ~TrainLog();

  void record(const StepResult& step, int64_t skipped_total);
  void validation(int64_t step, double loss);
  // The closing line: steps, mean samples/s, skipped steps, wall time and
  // each rank's peak RSS (MiB, by rank); also a last metrics.jsonl line.
  void finish(int64_t skipped_total, const std::vector<double>& peak_rss_mib);

  bool is_logged_step(int64_t step) const;

 private:
  void write_line(const std::string& json);

  const bool enabled_;
  const TrainLogOptions options_;
  std::ofstream metrics_;
  std::unique_ptr<Progress> progress_;
  // Since the last logged step:
  int64_t steps_ = 0;
  double loss_sum_ = 0, wall_ = 0;
  StepTimes times_;
  // Whole run:
  int64_t run_steps_ = 0;
  double run_wall_ = 0;
};

}  // namespace wt::train
