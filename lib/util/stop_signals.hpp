// Pre-emption signals: SIGTERM and SIGUSR1 (what SLURM sends with
// --signal, and before killing a job) and SIGINT ask the run to stop at the
// next step boundary, checkpoint and exit with kExitRequeue. The handler
// only records the signal; the training loop polls it, and the ranks agree
// on it collectively. A second SIGINT ends the process at once (the default
// action), for a user who does not want to wait.
#pragma once

namespace wt {

void install_stop_signal_handlers();

// The signal that asked to stop (SIGTERM, SIGUSR1, SIGINT), or 0.
int stop_signal();

// "SIGTERM", "SIGUSR1", "SIGINT" or "signal N".
const char* signal_name(int signal);

}  // namespace wt
