// Rank-aware logging on top of spdlog: "[12:00:01.123] [rank 0/8] [info] ...".
#pragma once

#include <spdlog/spdlog.h>

namespace wt::log {

// Sets the default logger. Rank 0 logs at `level`; other ranks log warnings
// and errors only, unless `all_ranks` is set (then every rank logs at `level`).
void init(int rank, int size, spdlog::level::level_enum level = spdlog::level::info, bool all_ranks = false);

}  // namespace wt::log
