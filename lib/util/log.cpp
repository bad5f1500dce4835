#include "wantrain/util/log.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "wantrain/util/progress.hpp"

namespace wt::log {

void init(int rank, int size, spdlog::level::level_enum level) {
  auto logger = spdlog::get("wantrain");
  // Colour only for a person at a terminal: a rank's stdout under mpirun is
  // a pseudo-terminal even when the job's output goes to a file.
  if (!logger)
    logger = spdlog::stdout_color_mt("wantrain",
                                     is_terminal(stdout) ? spdlog::color_mode::automatic : spdlog::color_mode::never);
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}/{}] [%^%l%$] %v", rank, size));
  logger->set_level(rank == 0 ? level : spdlog::level::warn);
  logger->flush_on(spdlog::level::info);  // SLURM log files should be current.
  spdlog::set_default_logger(logger);
}

}  // namespace wt::log
