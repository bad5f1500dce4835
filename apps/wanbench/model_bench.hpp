// `wanbench model`: forward and forward+backward seconds per sample and the
// process's peak RSS for one model config and precision on this machine.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_model_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
