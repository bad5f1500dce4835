#include "wantrain/app/app.hpp"

#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/distributed/abort.hpp"

namespace wt::app {

int run_app(int argc, char** argv, const std::function<int(distributed::World&, int, char**)>& body) {
  distributed::World world(argc, argv);
  int status = kExitOk;
  try {
    status = body(world, argc, argv);
  } catch (const distributed::CollectiveExit& exit) {
    status = exit.code;
  } catch (const UsageError& e) {
    distributed::abort_job(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    distributed::abort_job(e.what(), kExitFailure);
  } catch (...) {
    distributed::abort_job("unknown exception", kExitFailure);
  }
  world.finalize();
  return status;
}

}  // namespace wt::app
