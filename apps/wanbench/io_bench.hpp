// `wanbench io`: Loader throughput against a raw sequential read of the same
// bytes, side by side, for a tiny and a Wan-480p-like sample shape.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_io_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
