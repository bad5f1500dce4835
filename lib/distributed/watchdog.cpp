#include "wantrain/distributed/watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/roll_call.hpp"
#include "wantrain/util/error.hpp"

namespace wt::distributed {

Watchdog::Watchdog(std::string backend, std::chrono::milliseconds timeout, OnTimeout on_timeout)
    : backend_(std::move(backend)),
      timeout_(timeout),
      on_timeout_(on_timeout ? std::move(on_timeout)
                             : OnTimeout([](const std::string& message) { abort_job(message, kExitFailure); })),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::watch(std::string description, std::function<bool()> finished) {
  std::lock_guard<std::mutex> lock(mutex_);
  tracked_.push_back({std::move(description), std::move(finished), std::chrono::steady_clock::now()});
}

void Watchdog::run() {
  using namespace std::chrono;
  // Poll often enough that a timeout is reported within ~10% of its length.
  const auto interval = std::clamp<milliseconds>(timeout_ / 10, milliseconds(1), milliseconds(100));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, interval, [this] { return stop_; });
    const auto now = steady_clock::now();
    for (auto it = tracked_.begin(); it != tracked_.end();) {
      if (it->finished()) {
        it = tracked_.erase(it);
      } else if (now - it->start > timeout_) {
        const std::string what = fmt::format("{} {} did not complete within {:.3g} s ({})", backend_, it->description,
                                             duration<double>(timeout_).count(), setting_reference("comm_timeout"));
        it = tracked_.erase(it);
        lock.unlock();
        // Which ranks still answer (outside the lock: the roll call waits).
        std::string why = roll_call_clause(timeout_);
        if (why.empty())
          why = "a rank may have died, skipped this collective or issued collectives in a different order";
        const std::string message = fmt::format("{}: {}", what, why);
        on_timeout_(message);
        lock.lock();
      } else {
        ++it;
      }
    }
  }
}

}  // namespace wt::distributed
