// What run.json (train/run_record.hpp) says ran, and where: the tool, its
// version and git commit, this process's command line, and the world.
#pragma once

#include <string>

#include "wantrain/train/run_record.hpp"

namespace wt::distributed {
class Comm;
class World;
}  // namespace wt::distributed

namespace wt::app {

// Collective (the hosts of every rank are gathered).
train::RunIdentity run_identity(const std::string& program, const distributed::World& world,
                                const distributed::Comm& comm, int argc, char** argv);

}  // namespace wt::app
