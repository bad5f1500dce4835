// A progress bar for long operations, drawn on a stream (stderr by default)
// only when it shows live output (SLURM log files get no carriage-return noise).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace wt {

// Whether `stream` ends at a terminal a person watches: isatty, and, for a
// rank under mpirun (whose output is a pseudo-terminal mpirun relays), the
// parent's same stream too.
bool is_terminal(std::FILE* stream);

// Whether live output (a redrawn progress bar, colours) suits `stream`: a
// terminal, outside a SLURM job (SLURM_JOB_ID), whose output is read later
// from files even when an interactive step has a terminal. nullptr: none.
bool shows_live_output(std::FILE* stream);

class Progress {
 public:
  Progress(std::string label, int64_t total, std::FILE* stream = stderr);
  ~Progress();  // finishes the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);
  // Ends the bar's line so that a message can be printed under it; the bar
  // is drawn again on the next advance.
  void interrupt();
  // Text drawn after the counts, e.g. the latest loss and the ETA.
  void set_status(std::string status) { status_ = std::move(status); }
  bool enabled() const { return enabled_; }

 private:
  void draw();
  std::string label_, status_;
  std::FILE* stream_;
  int64_t total_, done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace wt
