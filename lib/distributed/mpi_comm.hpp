// MpiComm: Comm over MPI collectives, for CPU tensors.
//
// Contract: all ranks construct their MpiComm in the same order (the
// constructor duplicates the World's communicator: collective), and then
// follow Comm's contract. Needs MPI_THREAD_MULTIPLE: collectives run on a
// worker thread of the MpiComm's own, one at a time, in issue order, with
// the blocking MPI calls (whose tuned algorithms the non-blocking ones lack),
// so an async op overlaps the caller's compute. A failing MPI call ends the
// job (MPI_Abort) with one line: a collective failed on one rank leaves the
// others inconsistent.
//
// dtypes: float32, float64, bfloat16, float16, int32, int64, uint8. MPI has no
// 16-bit floats: see mpi_half_ops.hpp for how they are reduced. Avg is the
// sum (in the tensor's dtype) divided by the world size: for fp16 the sum may
// overflow where NCCL's avg (which scales first) would not.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/mpi_half_ops.hpp"
#include "wantrain/distributed/watchdog.hpp"

namespace wt::distributed {

class World;

// The MPI datatype that carries `dtype` (bf16/fp16: MPI_UINT16_T); throws
// wt::Error for dtypes MpiComm does not support.
MPI_Datatype mpi_datatype(at::ScalarType dtype);

class MpiComm final : public Comm {
 public:
  // all_reduce and broadcast send at most `max_chunk_bytes` per MPI call.
  explicit MpiComm(const World& world, CommOptions options = {}, int64_t max_chunk_bytes = int64_t{1} << 30);
  // Takes `comm` (a communicator of its own: freed by the destructor).
  MpiComm(MPI_Comm comm, CommOptions options, int64_t max_chunk_bytes = int64_t{1} << 30);
  // Completes every issued op (when unwinding from an exception: only the
  // one running), then stops the worker and frees the communicator.
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  const char* backend() const override { return "MPI"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  at::Device device() const override { return at::Device(at::kCPU); }

  WorkPtr all_reduce_async(const at::Tensor& tensor, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast_async(const at::Tensor& tensor, const BroadcastOptions& options = {}) override;
  WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input,
                           const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                               const ReduceScatterOptions& options = {}) override;
  WorkPtr all_to_all_async(const at::Tensor& output, const at::Tensor& input,
                           const AllToAllOptions& options = {}) override;
  WorkPtr barrier_async(const BarrierOptions& options = {}) override;
  std::unique_ptr<Comm> split(int color) override;

  // The communicator and the MPI reduction the collectives use, so that a
  // benchmark can run raw MPI on exactly the same.
  MPI_Comm native() const { return comm_; }
  MPI_Op native_op(at::ScalarType dtype, ReduceOp op) const;

 private:
  class MpiWork;
  struct Task {
    std::string description;
    std::function<void()> run;
    std::shared_ptr<MpiWork> work;
  };

  int64_t chunk_elements(const at::Tensor& t) const;
  WorkPtr enqueue(std::string description, std::vector<at::Tensor> keep_alive, std::function<void()> run);
  void worker_loop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  void start();

  CommOptions options_;
  int64_t max_chunk_bytes_;
  std::uint64_t next_seq_ = 0;
  HalfReduceOps half_ops_;
  Watchdog watchdog_;

  // Threads blocked in Work::wait(): while there are some, nothing else is
  // computing on this rank and the worker polls MPI without pausing.
  std::shared_ptr<std::atomic<int>> waiters_ = std::make_shared<std::atomic<int>>(0);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace wt::distributed
