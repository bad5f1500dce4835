#include "wantrain/util/log.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cstdlib>

#include "wantrain/util/progress.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::log {
namespace {

// Each line of `text` at `level`, so that every line in a log file carries
// the same time and rank prefix.
void log_lines(spdlog::level::level_enum level, const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t stop = end == std::string::npos ? text.size() : end;
    spdlog::log(level, "{}", std::string_view(text).substr(start, stop - start));
    start = stop + 1;
  }
}

// The library's reports, as lines of this log.
class LogReporter : public Reporter {
 public:
  void report(Severity severity, const std::string& message) override {
    log_lines(severity == Severity::Info      ? spdlog::level::info
              : severity == Severity::Warning ? spdlog::level::warn
                                              : spdlog::level::err,
              message);
  }
};

}  // namespace

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
  static LogReporter reporter;
  set_reporter(&reporter);
}

void set_group(int rank, int size, const std::string& group, int group_rank, int group_size) {
  auto logger = spdlog::get("wantrain");
  if (!logger) return;
  logger->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}/{}, {} {}/{}] [%^%l%$] %v", rank, size, group,
                                  group_rank, group_size));
  if (group_rank == 0) logger->set_level(std::min(logger->level(), spdlog::level::info));
}

void info_lines(const std::string& text) { log_lines(spdlog::level::info, text); }

}  // namespace wt::log
