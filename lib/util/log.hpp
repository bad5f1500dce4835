// Rank-aware logging on top of spdlog: "[2026-11-25 12:00:01.123] [rank 0/8] [info] ...".
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace wt::log {

// Sets the default logger and installs it as the library's Reporter
// (util/reporter.hpp). Rank 0 logs at `level`; other ranks log warnings and
// errors only, so SLURM log files stay readable.
void init(int rank, int size, spdlog::level::level_enum level = spdlog::level::info);
// In a rank group of the job (wantrain --experts): lines name the group and
// the rank in it beside the job's rank, and the group's rank 0 informs.
void set_group(int rank, int size, const std::string& group, int group_rank, int group_size);

// Each line of `text` (a table, say) as an info line of its own, so that
// every line in a log file carries the same time and rank prefix.
void info_lines(const std::string& text);

}  // namespace wt::log
