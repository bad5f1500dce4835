#include "wantrain/util/log.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "wantrain/util/progress.hpp"

namespace wt::log {

void init(int rank, int size, spdlog::level::level_enum level) {
  auto logger = spdlog::get("wantrain");
  // Colour only for a person at a terminal (a rank's stdout under mpirun is
  // a pseudo-terminal even when the job's output goes to a file), never
  // under SLURM, and never when NO_COLOR is set and not empty (no-color.org).
  const char* no_color = std::getenv("NO_COLOR");
  const bool colour = shows_live_output(stdout) && (no_color == nullptr || *no_color == '\0');
  if (!logger)
    logger = spdlog::stdout_color_mt("wantrain", colour ? spdlog::color_mode::always : spdlog::color_mode::never);
  // The one format of every line: date and time, so that a log file read
  // days later, or lines of a requeued job, place themselves.
  logger->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}/{}] [%^%l%$] %v", rank, size));
  logger->set_level(rank == 0 ? level : spdlog::level::warn);
  logger->flush_on(spdlog::level::info);  // SLURM log files should be current.
  spdlog::set_default_logger(logger);
}

void info_lines(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t stop = end == std::string::npos ? text.size() : end;
    spdlog::info("{}", std::string_view(text).substr(start, stop - start));
    start = stop + 1;
  }
}

}  // namespace wt::log
