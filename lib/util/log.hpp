// Rank-aware logging on top of spdlog: "[12:00:01.123] [rank 0/8] [info] ...".
#pragma once

#include <spdlog/spdlog.h>

namespace wt::log {

// Sets the default logger. Rank 0 logs at `level`; other ranks log warnings
// and errors only, so SLURM log files stay readable.
void init(int rank, int size, spdlog::level::level_enum level = spdlog::level::info);

}  // namespace wt::log
