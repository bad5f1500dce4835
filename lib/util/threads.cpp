#include "wantrain/util/threads.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace wt {

int threads_per_rank(int requested, int ranks_on_node) {
  if (requested > 0) return requested;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // A launcher that bound this rank to some cores (mpirun --bind-to, SLURM)
  // already shared the node out: use them all.
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    const int allowed = CPU_COUNT(&mask);
    if (allowed > 0 && allowed < cores) return allowed;
  }
  return std::max(1, cores / std::max(1, ranks_on_node));
}

}  // namespace wt
