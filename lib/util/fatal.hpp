// The one way a wantrain process reports a fatal error and ends the job.
#pragma once

#include <string_view>

namespace wt {

// Writes "<program> [rank r/n on host]: error: <message>" to stderr as one line.
void print_error_line(std::string_view message);

// Prints the error line, then ends every rank of the job: MPI_Abort while MPI
// is up (so no other rank hangs in a collective), _Exit otherwise. Safe from
// any thread.
[[noreturn]] void abort_job(std::string_view message, int exit_code);

}  // namespace wt
