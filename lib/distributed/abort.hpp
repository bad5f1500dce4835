// The one way a wantrain process ends the whole job on a fatal error.
#pragma once

#include <string_view>

namespace wt::distributed {

// Prints the error line (util/fatal.hpp), runs the fatal hook (run.json),
// then ends every rank of the job:
// MPI_Abort while MPI is up (so no other rank hangs in a collective), _Exit
// otherwise. Safe from any thread.
[[noreturn]] void abort_job(std::string_view message, int exit_code);

}  // namespace wt::distributed
