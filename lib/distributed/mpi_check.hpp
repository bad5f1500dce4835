// MPI_CHECK(call): evaluates an MPI call once and throws wt::Error unless it
// returned MPI_SUCCESS, with MPI's own description of the failure. Only
// meaningful on communicators whose error handler is MPI_ERRORS_RETURN.
#pragma once

#include "wantrain/util/error.hpp"

namespace wt::distributed::detail {
[[noreturn]] void throw_mpi_failure(int code, const char* call, const char* file, int line);
}

#define MPI_CHECK(call)                                                                    \
  do {                                                                                     \
    const int wt_mpi_rc_ = (call);                                                         \
    if (wt_mpi_rc_ != MPI_SUCCESS)                                                         \
      ::wt::distributed::detail::throw_mpi_failure(wt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
