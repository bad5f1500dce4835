#include "wantrain/util/poll.hpp"

#include <algorithm>
#include <thread>

namespace wt {

bool poll_until(const std::function<bool()>& done, std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    if (done()) return true;
    if (Clock::now() - start > bound) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace wt
