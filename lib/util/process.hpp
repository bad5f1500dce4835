// Who this process is, for error lines and log prefixes.
#pragma once

#include <string>

namespace wt {

// This machine's host name.
std::string host_name();

// "rank 1/8 on node03" while MPI is up, "node03" before MPI_Init or after
// MPI_Finalize. Asks MPI each time rather than caching, so it holds no state.
std::string process_label();

}  // namespace wt
