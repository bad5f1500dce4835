// The one format of a fatal error line (distributed/abort.hpp ends the job
// after printing it).
#pragma once

#include <functional>
#include <string_view>

namespace wt {

// Writes "<program> [rank r/n on host]: error: <message>" to stderr as one line.
void print_error_line(std::string_view message);

// A last word before a fatal error ends the job (distributed::abort_job,
// after the error line is printed): fit records in run.json how the run
// ended. It runs at most once per process, from whichever thread ends the
// job, for at most a few seconds (a hung file system cannot keep the job
// alive); what it throws is ignored. One hook at a time, held while the
// scope lives.
class FatalHookScope {
 public:
  explicit FatalHookScope(std::function<void(std::string_view message)> hook);
  ~FatalHookScope();
  FatalHookScope(const FatalHookScope&) = delete;
  FatalHookScope& operator=(const FatalHookScope&) = delete;
};

// Runs the hook of the live FatalHookScope, if any (abort_job calls it).
void run_fatal_hook(std::string_view message);

}  // namespace wt
