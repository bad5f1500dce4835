#include "wantrain/distributed/abort.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "wantrain/util/fatal.hpp"

namespace wt::distributed {

void abort_job(std::string_view message, int exit_code) {
  print_error_line(message);
  std::fflush(stdout);
  run_fatal_hook(message);  // bounded: the abort comes in any case
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace wt::distributed
