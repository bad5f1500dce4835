// Watchdog: ends the job when a collective runs past the comm timeout.
//
// A backend calls watch() as an op starts running, with a probe that says
// whether it has finished; a thread of the watchdog's own polls the probes
// (so a hang is caught even when nobody waits on the op) and calls
// on_timeout once per op that exceeded the timeout. The default on_timeout
// prints one line and MPI_Aborts every rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace wt::distributed {

class Watchdog {
 public:
  using OnTimeout = std::function<void(const std::string& message)>;

  Watchdog(std::string backend, std::chrono::milliseconds timeout, OnTimeout on_timeout = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `description` names the op for the timeout message, e.g.
  // "all_reduce #12 (float32 x 1024, sum)". Thread-safe.
  void watch(std::string description, std::function<bool()> finished);

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Tracked {
    std::string description;
    std::function<bool()> finished;
    std::chrono::steady_clock::time_point start;
  };
  void run();

  const std::string backend_;
  const std::chrono::milliseconds timeout_;
  const OnTimeout on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Tracked> tracked_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wt::distributed
