// The World and Comm of the 2-rank test binary, for the tests.
#pragma once

#include "dist/comm.hpp"
#include "dist/world.hpp"

wt::World& test_world();
// An MpiComm over the test World (timeout 60 s), alive for the whole run.
wt::Comm& test_comm();
