#include "wantrain/distributed/poll_request.hpp"

#include "wantrain/distributed/mpi_check.hpp"
#include "wantrain/util/poll.hpp"

namespace wt::distributed {

bool poll_request(MPI_Request& request, std::chrono::milliseconds bound) {
  return poll_until(
      [&] {
        int done = 0;
        MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      bound);
}

}  // namespace wt::distributed
