// The World and Comm of the 2-rank test binary, for the tests.
#pragma once

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/world.hpp"

wt::distributed::World& test_world();
// An MpiComm over the test World (timeout 60 s), alive for the whole run.
wt::distributed::Comm& test_comm();
// The tests' short name for it.
inline wt::distributed::Comm& comm() { return test_comm(); }
