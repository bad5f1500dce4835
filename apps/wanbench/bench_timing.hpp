// Timing helpers shared by wanbench's benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "wantrain/util/seconds.hpp"

namespace wt {  // wanbench's own: its benchmarks are in namespace wt

inline constexpr double kMiB = 1024.0 * 1024.0;

// The middle value (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace wt
