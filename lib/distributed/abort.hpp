// The one way a wantrain process ends the whole job on a fatal error.
#pragma once

#include <string_view>

namespace wt::distributed {

// Prints the error line (util/fatal.hpp), appends it to the launcher's
// WANTRAIN_ABORT_FILE when that exists (mpi/wanrun), runs the fatal hook
// (run.json), then ends every rank of the job:
// MPI_Abort while MPI is up (so no other rank hangs in a collective), _Exit
// otherwise. Safe from any thread.
[[noreturn]] void abort_job(std::string_view message, int exit_code);

// The same for an error on the thread that initialised MPI: when the world
// is one rank there is no other rank to stop, so MPI is finalized cleanly
// (no launcher's MPI_ABORT banner after the one line) before the exit; in a
// larger world, or when finalizing does not return within seconds, this is
// abort_job.
[[noreturn]] void end_job_from_main_thread(std::string_view message, int exit_code);

}  // namespace wt::distributed
