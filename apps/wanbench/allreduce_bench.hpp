// `wanbench allreduce`: Comm::all_reduce against raw MPI_Allreduce on the same
// buffers, size by size, in the manner of nccl-tests.
#pragma once

namespace wt {
class World;
int run_allreduce_bench(World& world, int argc, char** argv);
}  // namespace wt
