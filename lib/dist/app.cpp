#include "dist/app.hpp"

#include "dist/world.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"
#include "util/fatal.hpp"

namespace wt {

int run_app(int argc, char** argv, const std::function<int(World&, int, char**)>& body) {
  World world(argc, argv);
  int status = kExitOk;
  try {
    status = body(world, argc, argv);
  } catch (const CollectiveExit& exit) {
    status = exit.code;
  } catch (const UsageError& e) {
    abort_job(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    abort_job(e.what(), kExitFailure);
  } catch (...) {
    abort_job("unknown exception", kExitFailure);
  }
  world.finalize();
  return status;
}

}  // namespace wt
