// `wanbench optim`: the optimizer phase of a step on one model's parameters,
// side by side: torch::optim::AdamW's loop, the multi-tensor (_foreach_)
// step and the fused CPU step (lib/train/adamw_step.hpp), and the EMA per
// tensor against multi-tensor.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_optim_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
