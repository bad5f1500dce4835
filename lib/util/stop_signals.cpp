#include "wantrain/util/stop_signals.hpp"

#include <atomic>
#include <csignal>
#include <initializer_list>

namespace wt {
namespace {

// Written by a handler on whichever thread the signal lands, read by the
// training thread: a lock-free atomic is safe in both places.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signal) {
  if (signal == SIGINT && g_stop_signal.load() != 0) {
    std::signal(SIGINT, SIG_DFL);  // Ctrl-C after a stop was asked: give up now
    std::raise(SIGINT);
    return;
  }
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

const int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

}  // namespace

StopSignalHandlers::StopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a read or a collective with EINTR
  for (int signal : kStopSignals) sigaction(signal, &action, nullptr);
}

StopSignalHandlers::~StopSignalHandlers() {
  for (int signal : kStopSignals) std::signal(signal, signal == SIGINT ? SIG_DFL : SIG_IGN);
}

int stop_signal() { return g_stop_signal.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace wt
