// `wanbench allreduce`: Comm::all_reduce, reduce_scatter or all_gather
// (--collective) against the raw MPI call on the same buffers, size by size,
// in the manner of nccl-tests.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_allreduce_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
