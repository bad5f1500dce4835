// run.json: how one start of a run on an output directory went, written by
// rank 0 into <output-dir>/run.json when training starts (exit_status null:
// running, or ended without a record) and again when fit returns however it
// returns (finished, a stop signal, a failed checkpoint write, too many
// skipped steps) or an error ends the job on rank 0, so that a person or a
// script finds in one place what ran, on what, how far and how fast, and
// why it ended. A resumed run keeps the earlier starts it continues under
// "earlier_runs". `wantrain report` prints it (docs/training.md#watching-a-run).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wantrain/train/train_log.hpp"

namespace wt::train {

// What the app knows of the run, for the record.
struct RunIdentity {
  std::string program, version, git_commit;
  std::string command_line;        // this process's argv
  std::vector<std::string> hosts;  // by rank
  std::string backend, device;     // "mpi", "cpu"
};

// How the run went, from fit's loop.
struct RunProgress {
  int64_t last_step = 0;
  int64_t steps = 0;         // taken by this start
  double train_seconds = 0;  // their wall time
  double samples_per_s = 0;
  double last_loss = std::numeric_limits<double>::quiet_NaN();  // the last logged mean
};

class RunRecord {
 public:
  // `enabled` on rank 0 only. A resumed run (first_step > 0) reads the
  // directory's run.json for the starts before `first_step`.
  RunRecord(bool enabled, std::string output_dir, RunIdentity identity, std::string config_json,
            std::string model_config_json, int64_t first_step, int64_t total_steps);

  // The record of a start under way (exit_status null), as far as it got.
  void write_started() const;

  void progress(const RunProgress& progress);
  void validation(int64_t step, double loss);
  void sample(int64_t step, const SampleReport& sample);

  // Writes run.json whole (through a .tmp and rename) with the progress last
  // recorded: `status` is the process exit status, `reason` one line of why
  // the run ended. A write that fails is a warning (once), never an error.
  // Safe from another thread (the fatal hook) while this one records.
  void write(int status, const std::string& reason, const MemoryPeaks& peaks) const;

 private:
  bool enabled_;
  std::string output_dir_;
  RunIdentity identity_;
  std::string config_json_, model_config_json_;
  int64_t first_step_, total_steps_;
  std::chrono::system_clock::time_point started_;
  nlohmann::json earlier_runs_ = nlohmann::json::array();
  double final_val_loss_ = std::numeric_limits<double>::quiet_NaN();
  double best_val_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t best_val_step_ = -1;
  nlohmann::json last_sample_;
  RunProgress progress_;
  mutable bool write_failed_ = false;  // warned once
  mutable std::mutex mutex_;           // the fields that progress(), validation() and sample() change

  void write_json(const nlohmann::json& status, const std::string& reason, const MemoryPeaks& peaks) const;
};

}  // namespace wt::train
