// The subcommands of wandata; each parses its own options from argv[1..].
#pragma once

namespace wt {
class World;
int run_synth(World& world, int argc, char** argv);
int run_inspect(World& world, int argc, char** argv);
int run_verify(World& world, int argc, char** argv);
int run_split(World& world, int argc, char** argv);
int run_merge(World& world, int argc, char** argv);
}  // namespace wt
