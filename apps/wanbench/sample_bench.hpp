// `wanbench sample`: the seconds per solver step of wansample's pipeline
// (wan/sample/sampling_pipeline.hpp), as wansample runs it, on a model of
// random weights: each round samples with N and with 2N steps, and the
// difference over N is a step (loading, checks and the first step's set-up
// cancel). Under mpirun the ranks split each sample's tokens (--sp), or the
// branches of guidance (--cfg-parallel), or the weights (--shard-weights).
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_sample_bench(distributed::World& world, int argc, char** argv);
}  // namespace wt
