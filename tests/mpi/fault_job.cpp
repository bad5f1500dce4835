// A 2-rank job that goes wrong on purpose, for launch_test.cpp:
//   fault_job skip  TIMEOUT   the last rank skips an all_reduce that the others issue
//   fault_job throw           the last rank throws while the others wait in a barrier
//   fault_job throw-blocked   the same, from a scope whose destructor would block for an hour
//   fault_job agree-skip TIMEOUT   the last rank skips a World agreement the others enter
//   fault_job busy TIMEOUT    the last rank computes (sleeps) through the others' all_reduce
//   fault_job stop TIMEOUT    the last rank stops itself (SIGSTOP) before an all_reduce
#include <torch/torch.h>

#include <csignal>
#include <chrono>
#include <string>
#include <thread>

#include "wantrain/app/app.hpp"
#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"

namespace {

int run(wt::distributed::World& world, int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const double timeout_s = argc > 2 ? std::stod(argv[2]) : 600.0;
  wt::distributed::MpiComm comm(
      world, wt::distributed::CommOptions{std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))});
  const bool last = world.rank() == world.size() - 1;
  comm.barrier();  // every rank is up; collective #0 completes
  if (mode == "skip") {
    if (!last) {
      auto t = torch::ones({16});
      comm.all_reduce(t);  // #1: never matched by the last rank
    }
    return 0;
  }
  if (mode == "throw") {
    if (last) throw wt::Error("injected failure on the last rank");
    comm.barrier();  // only an abort can end this wait (the timeout is long)
    return 0;
  }
  if (mode == "throw-blocked") {
    // Like a checkpoint writer draining a write that never ends: the line
    // must be printed, and the job ended, before this destructor runs.
    struct BlocksOnDestruction {
      ~BlocksOnDestruction() { std::this_thread::sleep_for(std::chrono::hours(1)); }
    } blocks;
    if (last) throw wt::Error("injected failure on the last rank");
    comm.barrier();
    return 0;
  }
  if (mode == "busy" || mode == "stop") {
    if (last && mode == "stop") std::raise(SIGSTOP);  // as a process frozen on a lost node
    if (last) std::this_thread::sleep_for(std::chrono::duration<double>(3 * timeout_s));
    auto t = torch::ones({16});
    comm.all_reduce(t);  // #1: the last rank comes too late
    return 0;
  }
  if (mode == "agree-skip") {
    world.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (!last) world.agree([] {});  // never matched by the last rank
    return 0;
  }
  throw wt::UsageError("fault_job: mode must be skip, throw, throw-blocked, agree-skip, busy or stop");
}

}  // namespace

int main(int argc, char** argv) { return wt::app::run_app(argc, argv, run); }
