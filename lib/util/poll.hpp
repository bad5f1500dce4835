// Waiting for something that finishes elsewhere (an MPI request, a
// non-blocking NCCL call), bounded and without holding a core.
#pragma once

#include <chrono>
#include <functional>

namespace wt {

// Calls `done` until it returns true or `bound` has passed, sleeping between
// calls from 1 us, doubling up to 1 ms: a quick answer costs one or two
// calls, a long wait no core, and no start-up step notices the 1 ms.
// Returns whether `done` said so in time.
bool poll_until(const std::function<bool()>& done, std::chrono::milliseconds bound);

}  // namespace wt
