// World: the MPI processes of this job.
//
// Contract: construct exactly one World, in main, on the main thread, before
// any other thread starts; it initialises MPI with MPI_THREAD_MULTIPLE (the
// comm worker threads call MPI concurrently with the main thread). Destroy
// every Comm before finalize(); finalize() runs from main (or ~World), never
// from a static destructor. Without a launcher the process is a world of one.
//
// World's own collectives (peers(), agree(), ...) run on a private duplicate
// of MPI_COMM_WORLD, from the main thread, in the same order on every rank.
// Each is bounded: it polls a non-blocking MPI operation, and a rank that
// waits longer than timeout() prints one line naming the operation and ends
// the job, so that no start-up or shutdown step can hang it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wt::distributed {

class RollCall;

// Thrown on every rank by World::agree() to leave main with one status,
// together, after the error line was printed once.
struct CollectiveExit {
  int code;
};

// Removes a singleton's own Open MPI session directory (world.cpp): at
// finalize, and on the paths that end the process without it (abort.hpp).
void remove_singleton_session_dir() noexcept;

class World {
 public:
  World(int& argc, char**& argv);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  World(World&&) = delete;
  World& operator=(World&&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank and count among the processes on this node (MPI_COMM_TYPE_SHARED).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  bool is_root() const { return rank_ == 0; }
  // A duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, for World's own use
  // (a group's: a split of it).
  MPI_Comm comm() const { return comm_; }

  // Collective over this World: the ranks of equal `colour` as a World of
  // their own (a rank group: Wan2.2 A14B's experts train one each), ranked in
  // the order of their ranks here. Everything that takes a World (agreements,
  // communicators, checkpoints) then runs within the group; the node-local
  // rank and size stay the job's (GPUs are the node's), the roll call and an
  // abort stay the whole job's. Destroy it before finalize().
  std::unique_ptr<World> split(int colour) const;
  // This process's rank and the rank count in the whole job (a group's
  // rank() and size() are within the group).
  int job_rank() const { return job_rank_; }
  int job_size() const { return job_size_; }

  struct Peer {
    int rank, local_rank, local_size;
    std::string host;
  };
  // Collective: every rank's identity, indexed by rank, on every rank.
  std::vector<Peer> peers() const;

  // Collective: runs `step` on every rank. If it throws UsageError on any
  // rank, the lowest such rank prints its message (one line for the job) and
  // every rank throws CollectiveExit{kExitUsage}. Other exceptions propagate.
  void agree(const std::function<void()>& step) const;

  void barrier() const;

  // Collective: rank 0's `text` on every rank.
  void broadcast(std::string& text) const;

  // Collective: every rank's `mine`, indexed by rank, on every rank; `what`
  // names the exchange in the timeout line. `bound`: how long it may wait
  // (0: the timeout below), for ranks that come from work of uneven length.
  std::vector<std::string> all_gather(const std::string& mine, const char* what,
                                      std::chrono::milliseconds bound = {}) const;

  // Collective: the maximum of each element over the ranks, waiting at most
  // `bound` (a wait that knows its own length, e.g. a checkpoint write);
  // `setting` is what the timeout line names as the bound's source.
  std::vector<int64_t> max_over_ranks(std::vector<int64_t> values, const std::string& what,
                                      std::chrono::milliseconds bound, const char* setting = "comm_timeout") const;

  // How long a World collective may wait for the other ranks (the comm
  // timeout once the options are read; 10 minutes until then).
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Ends MPI (a group: frees its communicator). Idempotent; every Comm must be gone.
  void finalize() noexcept;

 private:
  struct GroupTag {};
  World(GroupTag, const World& parent, MPI_Comm comm);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, job_rank_ = 0, job_size_ = 1;
  bool group_ = false;  // a split of another World: it neither initialises nor finalizes MPI
  std::string host_;
  bool finalized_ = false;
  // Names the ranks that no longer answer when a collective times out.
  std::unique_ptr<RollCall> roll_call_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};

  // Waits for `request` (of the collective `what`) for at most `bound`.
  void wait(MPI_Request& request, const char* what, std::chrono::milliseconds bound,
            const char* setting = "comm_timeout") const;
};

}  // namespace wt::distributed
