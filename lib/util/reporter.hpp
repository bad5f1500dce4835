// What the library has to tell the person running a job (a resumed
// checkpoint, the teacher loaded, a stop, a skipped step, a write that
// failed) goes through one Reporter, never straight to a stream: the tool
// installs its log (log::init, which run_app calls), a program embedding the library
// installs its own, and a test installs one that captures the lines.
//
// Until one is installed, reports are dropped. Reporting is thread-safe as
// far as the installed reporter is (the log's is).
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

namespace wt {

enum class Severity { Info, Warning, Error };

class Reporter {
 public:
  virtual ~Reporter() = default;
  // `message` may hold several lines (a table); each is one line of the report.
  virtual void report(Severity severity, const std::string& message) = 0;
};

// Installs `reporter` for as long as this object lives, then restores the
// one before it. Not for use while another thread installs reporters.
class ScopedReporter {
 public:
  explicit ScopedReporter(Reporter& reporter);
  ~ScopedReporter();
  ScopedReporter(const ScopedReporter&) = delete;
  ScopedReporter& operator=(const ScopedReporter&) = delete;

 private:
  Reporter* previous_;
};

// Installs `reporter` for the rest of the process (nullptr: drop reports).
void set_reporter(Reporter* reporter);

void report_message(Severity severity, const std::string& message);

template <class... Args>
void report_info(fmt::format_string<Args...> format, Args&&... args) {
  report_message(Severity::Info, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void report_warning(fmt::format_string<Args...> format, Args&&... args) {
  report_message(Severity::Warning, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void report_error(fmt::format_string<Args...> format, Args&&... args) {
  report_message(Severity::Error, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace wt
