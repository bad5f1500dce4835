#include "util/fatal.hpp"

#include <errno.h>
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "util/process.hpp"

namespace wt {

void print_error_line(std::string_view message) {
  // One write of the whole line, so lines of different ranks do not interleave.
  const std::string line = fmt::format("{} [{}]: error: {}\n", program_invocation_short_name, process_label(), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void abort_job(std::string_view message, int exit_code) {
  print_error_line(message);
  std::fflush(stdout);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace wt
