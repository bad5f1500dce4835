// Wall-clock seconds since a steady_clock time point: the phases a log line
// reports (data, teacher, forward, ...).
#pragma once

#include <chrono>

namespace wt {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace wt
