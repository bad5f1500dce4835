// The subcommands of wandata; each parses its own options from argv[1..].
#pragma once

namespace wt::distributed {
class World;
}  // namespace wt::distributed
namespace wt {
int run_synth(distributed::World& world, int argc, char** argv);
int run_inspect(distributed::World& world, int argc, char** argv);
int run_verify(distributed::World& world, int argc, char** argv);
int run_split(distributed::World& world, int argc, char** argv);
int run_merge(distributed::World& world, int argc, char** argv);
int run_encode(distributed::World& world, int argc, char** argv);
int run_decode(distributed::World& world, int argc, char** argv);
int run_stage(int argc, char** argv);  // no MPI: see main()
}  // namespace wt
