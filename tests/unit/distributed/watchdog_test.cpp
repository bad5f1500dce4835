// The watchdog reports an op that overruns the timeout, and only such an op.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "wantrain/distributed/watchdog.hpp"

using namespace std::chrono_literals;

namespace {
struct Reports {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> messages;
  wt::distributed::Watchdog::OnTimeout handler() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.push_back(m);
      cv.notify_all();
    };
  }
};
}  // namespace

TEST(Watchdog, ReportsAnOpThatDoesNotFinishWithItsDescription) {
  Reports reports;
  wt::distributed::Watchdog watchdog("MPI", 50ms, reports.handler());
  watchdog.watch("all_reduce #7 (float32 x 16, sum)", [] { return false; });
  std::unique_lock<std::mutex> lock(reports.mutex);
  // A generous bound that only guards against a hang; the report comes after ~50 ms.
  ASSERT_TRUE(reports.cv.wait_for(lock, 30s, [&] { return !reports.messages.empty(); }));
  EXPECT_NE(reports.messages[0].find("MPI all_reduce #7 (float32 x 16, sum) did not complete within 0.05 s"),
            std::string::npos)
      << reports.messages[0];
  EXPECT_NE(reports.messages[0].find("(the comm_timeout setting)"), std::string::npos);
}

TEST(Watchdog, StaysQuietForOpsThatFinish) {
  Reports reports;
  {
    wt::distributed::Watchdog watchdog("MPI", 20ms, reports.handler());
    std::atomic<bool> done{false};
    watchdog.watch("broadcast #0 (float32 x 1, root 0)", [&] { return done.load(); });
    done = true;
    std::this_thread::sleep_for(200ms);  // ten timeouts: the finished op must not be reported
  }
  EXPECT_TRUE(reports.messages.empty());
}

TEST(Watchdog, ReportsEachOverrunOnce) {
  Reports reports;
  {
    wt::distributed::Watchdog watchdog("NCCL", 10ms, reports.handler());
    watchdog.watch("barrier #3", [] { return false; });
    std::unique_lock<std::mutex> lock(reports.mutex);
    ASSERT_TRUE(reports.cv.wait_for(lock, 30s, [&] { return !reports.messages.empty(); }));
    lock.unlock();
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(reports.messages.size(), 1u);
}
