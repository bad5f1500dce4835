// Waiting for a non-blocking MPI operation without holding a core: polled,
// with sleeps between polls (util/poll.hpp), so that a rank that waits for
// minutes or hours (a World agreement, the sample ranks between samples)
// leaves the node's cores to the ranks that compute.
#pragma once

#include <mpi.h>

#include <chrono>

namespace wt::distributed {

// No bound: a wait that only the job's end (a peer's death ends it) can cut.
inline constexpr std::chrono::milliseconds kUnbounded = std::chrono::hours(24 * 365);

// Whether `request` completed within `bound` (it stays pending otherwise).
bool poll_request(MPI_Request& request, std::chrono::milliseconds bound = kUnbounded);

}  // namespace wt::distributed
