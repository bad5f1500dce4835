#include "util/stop_signals.hpp"

#include <csignal>
#include <initializer_list>

namespace wt {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) {
  if (signal == SIGINT && g_stop_signal == SIGINT) {
    std::signal(SIGINT, SIG_DFL);  // the second Ctrl-C: give up now
    std::raise(SIGINT);
    return;
  }
  if (g_stop_signal == 0) g_stop_signal = signal;
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a read or a collective with EINTR
  for (int signal : {SIGTERM, SIGUSR1, SIGINT}) sigaction(signal, &action, nullptr);
}

int stop_signal() { return g_stop_signal; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace wt
