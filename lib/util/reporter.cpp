#include "wantrain/util/reporter.hpp"

#include <atomic>

namespace wt {
namespace {

std::atomic<Reporter*>& installed() {
  static std::atomic<Reporter*> reporter{nullptr};
  return reporter;
}

}  // namespace

ScopedReporter::ScopedReporter(Reporter& reporter) : previous_(installed().exchange(&reporter)) {}

ScopedReporter::~ScopedReporter() { installed().store(previous_); }

void set_reporter(Reporter* reporter) { installed().store(reporter); }

void report_message(Severity severity, const std::string& message) {
  if (auto* reporter = installed().load()) reporter->report(severity, message);
}

}  // namespace wt
