// `wanbench step`: a training step of wantrain's Trainer and its time split,
// with the Reducer and with gradient communication skipped, side by side in
// one run (their difference is the communication backward did not hide);
// and the Reducer's whole-model gradient sync against one raw
// MPI_Allreduce of the same bytes.
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_step_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
