// RollCall: when a collective has waited too long, which ranks still answer?
//
// A collective that never completes cannot say which rank is missing. So
// every rank runs a small responder thread on a private communicator that
// answers a ping at once, whatever its main and comm threads are doing
// (computing, or waiting in the same collective). A rank whose process is
// gone or stopped, or whose node has dropped off the network, gives no
// answer; the timeout lines name those ranks and their hosts, and otherwise
// say that every rank is alive (so one skipped a collective, or is slow).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wt::distributed {

class RollCall {
 public:
  // Collective over `world`: duplicates it and gathers every rank's host.
  // Without `respond` no thread answers for this rank (WANTRAIN_ROLL_CALL=0).
  RollCall(MPI_Comm world, const std::string& host, bool respond = true);
  ~RollCall();  // stops the responder; call before MPI_Finalize
  RollCall(const RollCall&) = delete;
  RollCall& operator=(const RollCall&) = delete;

  // Pings every other rank and waits at most `wait` for the answers;
  // returns the ranks that gave none, in order. Thread-safe.
  std::vector<int> silent(std::chrono::milliseconds wait);

  // One clause for a timeout line: "no answer to a roll call within 2 s
  // from rank 1 on node1: it has exited, ...", or "every rank answers ...".
  std::string describe(std::chrono::milliseconds wait);

  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  void respond();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;
  std::mutex asking_;  // one roll call at a time
  int round_ = 0;
  std::atomic<bool> stop_{false};
  std::thread responder_;
};

// The process's roll call, registered by World (null before and after).
void set_roll_call(RollCall* roll_call);

// describe() of the registered roll call, waiting a fifth of `timeout`
// (between 0.5 and 5 s); empty when none is registered or the world is one rank.
std::string roll_call_clause(std::chrono::milliseconds timeout);

}  // namespace wt::distributed
