#include "wantrain/distributed/mpi_check.hpp"

#include <mpi.h>

#include <cstdio>

namespace wt::distributed::detail {

void throw_mpi_failure(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  // Checked by hand, not with assert: the message must exist in release builds.
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", code);
  ::wt::detail::throw_library_failure("MPI", call, text, file, line);
}

}  // namespace wt::distributed::detail
