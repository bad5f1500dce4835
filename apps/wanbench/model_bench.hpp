// `wanbench model`: forward and forward+backward seconds per sample and the
// process's peak RSS for one model config and precision on this machine.
#pragma once

namespace wt {
class World;
int run_model_bench(World& world, int argc, char** argv);
}  // namespace wt
