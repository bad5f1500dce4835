#include "wantrain/distributed/abort.hpp"

#include "wantrain/distributed/world.hpp"

#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "wantrain/util/fatal.hpp"

namespace wt::distributed {

namespace {
// Tells a launcher that watches the job (mpi/wanrun: WANTRAIN_ABORT_FILE, a
// file on its node) that this job is ending, so that it can end an mpirun
// that waits forever on a node it can no longer reach. One append of one line.
void tell_the_launcher(std::string_view message) {
  const char* path = std::getenv("WANTRAIN_ABORT_FILE");
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);  // only a file the launcher made
  if (fd < 0) return;
  std::string line(message);
  line += '\n';
  [[maybe_unused]] const auto written = ::write(fd, line.data(), line.size());
  ::close(fd);
}
}  // namespace

void abort_job(std::string_view message, int exit_code) {
  print_error_line(message);
  std::fflush(stdout);
  tell_the_launcher(message);
  run_fatal_hook(message);  // bounded: the abort comes in any case
  remove_singleton_session_dir();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void end_job_from_main_thread(std::string_view message, int exit_code) {
  int initialized = 0, finalized = 0, size = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) abort_job(message, exit_code);
  print_error_line(message);
  std::fflush(stdout);
  run_fatal_hook(message);
  // Another thread may still hold MPI (a comm worker); if that keeps
  // MPI_Finalize from returning, the status comes anyway.
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(exit_code);
  }).detach();
  MPI_Finalize();
  remove_singleton_session_dir();
  std::_Exit(exit_code);
}

}  // namespace wt::distributed
