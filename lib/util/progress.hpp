// A progress bar for long tool operations, drawn on stderr only when it is a
// terminal (SLURM log files get no carriage-return noise).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace wt {

class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();  // finishes the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);

 private:
  void draw();
  std::string label_;
  int64_t total_, done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace wt
