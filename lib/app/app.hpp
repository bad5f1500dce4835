// The main() of every wantrain tool: MPI up, the tool's body, MPI down, and
// one way out for errors.
#pragma once

#include <functional>

namespace wt::distributed {
class World;
}

namespace wt::app {

// Creates the World, starts the log (util/log.hpp: every line with the
// rank, and the library's Reporter), runs `body`, finalizes, returns body's
// exit status.
// An exception leaving `body` prints one line naming the rank and host and
// ends every rank with MPI_Abort (status 2 for a UsageError, 1 otherwise)
// before any destructor runs: the exception is left uncaught, and the
// terminate handler installed here reports it. CollectiveExit (from
// World::agree) leaves together, unwinding normally, without an abort.
int run_app(int argc, char** argv, const std::function<int(distributed::World&, int, char**)>& body);

// For a subcommand that needs no MPI (wantrain plot, wantrain report): runs
// `body`; an exception leaving it is one error line and status 2 for a
// UsageError, 1 otherwise.
int run_local(int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace wt::app
