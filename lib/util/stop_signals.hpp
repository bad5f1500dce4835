// Pre-emption signals: SIGTERM and SIGUSR1 (what SLURM sends with
// --signal, and before killing a job) and SIGINT ask the run to stop at the
// next step boundary, checkpoint and exit with kExitRequeue. The handler
// only records the signal; the training loop polls it, and the ranks agree
// on it collectively. A SIGINT after any stop signal ends the process at
// once (the default action), for a user who does not want to wait.
#pragma once

namespace wt {

// Installs the handlers for its lifetime, which is the process's: after it
// (the run is over, the process is ending) SIGTERM and SIGUSR1 are ignored,
// so a stop asked while the process exits (static destructors, MPI's
// finalize) does not turn a finished run into a killed one; SIGINT gets its
// default action back.
class StopSignalHandlers {
 public:
  StopSignalHandlers();
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;
};

// The signal that asked to stop (SIGTERM, SIGUSR1, SIGINT), or 0.
int stop_signal();

// "SIGTERM", "SIGUSR1", "SIGINT" or "a signal".
const char* signal_name(int signal);

}  // namespace wt
