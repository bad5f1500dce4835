// `wanbench ckpt`: checkpoint size; a synchronous save against the training
// stall of the same save on rank 0's background writer; the file's write
// rate against a plain sequential write of the same bytes to the same disk.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_ckpt_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
