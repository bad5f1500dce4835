#include "wantrain/app/app.hpp"

#include <exception>
#include <string>
#include <thread>

#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/util/log.hpp"

namespace wt::app {
namespace {

// The thread that initialised MPI: only it may finalize MPI.
std::thread::id& main_thread() {
  static std::thread::id id;
  return id;
}

// Reached for an exception that no handler takes. The C++ runtime then calls
// terminate without unwinding the stack (the Itanium ABI's two-phase
// unwinding finds no handler first), so no destructor has run yet: none of
// them (a checkpoint writer's drain, a comm worker's join) can block before
// this rank's line is printed and the job aborted.
[[noreturn]] void end_job_on_uncaught_exception() {
  int status = kExitFailure;
  std::string message = "terminate called without an active exception";
  if (const auto current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const UsageError& e) {
      message = e.what();
      status = kExitUsage;
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "unknown exception";
    }
  }
  if (std::this_thread::get_id() == main_thread()) distributed::end_job_from_main_thread(message, status);
  distributed::abort_job(message, status);
}

}  // namespace

int run_app(int argc, char** argv, const std::function<int(distributed::World&, int, char**)>& body) {
  distributed::World world(argc, argv);
  main_thread() = std::this_thread::get_id();
  log::init(world.rank(), world.size());  // and with it the library's Reporter: every tool reports alike
  std::set_terminate(end_job_on_uncaught_exception);
  int status = kExitOk;
  // Only the agreed exit is caught here (it leaves every rank together, after
  // the line was printed): any other exception must stay uncaught, see above.
  try {
    status = body(world, argc, argv);
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  }
  world.finalize();
  return status;
}

int run_local(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const UsageError& e) {
    print_error_line(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error_line(e.what());
    return kExitFailure;
  }
}

}  // namespace wt::app
