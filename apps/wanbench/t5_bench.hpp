// `wanbench t5`: the umT5 text encoder (wan/encoders/t5_encoder) on random
// token ids on this machine: seconds per forward (median), the weights'
// bytes and the process's peak RSS against them. scripts/vs_torch_encoders.py
// runs it against the PyTorch reference on the same weights and ids.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_t5_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
