// Comm: the collectives that data-parallel training needs, on tensors.
//
// Contract (as c10d's): every rank calls the same collectives, with the same
// shapes, dtypes and options, in the same order. A Comm is used from one
// thread at a time; its async forms return at once with a Work, and ops
// complete in issue order. A collective that has not completed within the
// Comm's timeout ends the whole job with one line naming the op, its sequence
// number and the rank (a rank died, skipped or reordered a collective).
//
// Tensors must be contiguous, on the Comm's device, and stay alive and
// untouched until their Work completes (the Work keeps a reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>

namespace wt::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* to_string(ReduceOp op);

struct AllReduceOptions {
  ReduceOp op = ReduceOp::Sum;
  // Started to run while the caller keeps computing on the same cores (the
  // Reducer's buckets during backward). MpiComm then waits for MPI without
  // holding a core, which frees it for the computation at some cost in
  // bandwidth; NCCL, which runs on the GPU, ignores it.
  bool overlaps_compute = false;
};
struct BroadcastOptions {
  int root = 0;
};
struct AllGatherOptions {};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::Sum;
  bool overlaps_compute = false;  // as AllReduceOptions'
};
struct AllToAllOptions {};
struct BarrierOptions {};

// Handle of an issued collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op is done (on a GPU backend: until the caller's compute
  // stream is ordered after it). Rethrows the op's error.
  virtual void wait() = 0;
  // Non-blocking: has the op finished?
  virtual bool completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};
};

class Comm {
 public:
  virtual ~Comm() = default;

  virtual const char* backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where this Comm's tensors must live.
  virtual at::Device device() const = 0;

  // In place on `tensor`: every rank ends with the reduction over ranks.
  // Avg is Sum divided by size(); it is defined for floating dtypes only.
  virtual WorkPtr all_reduce_async(const at::Tensor& tensor, const AllReduceOptions& options = {}) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual WorkPtr broadcast_async(const at::Tensor& tensor, const BroadcastOptions& options = {}) = 0;
  // output [size, *input.shape] (or any contiguous tensor of size*numel
  // elements): row r is rank r's input. In place when `input` is this
  // rank's row of `output` (the same memory): nothing is copied for it.
  virtual WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input,
                                   const AllGatherOptions& options = {}) = 0;
  // input holds size chunks of output.numel() elements; rank r's output is
  // the reduction over ranks of chunk r.
  virtual WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                       const ReduceScatterOptions& options = {}) = 0;
  // input and output hold size() chunks of equal numel: chunk j of rank
  // r's input becomes chunk r of rank j's output (MPI_Alltoall; sequence
  // parallelism's exchange of tokens for heads). Not in place.
  virtual WorkPtr all_to_all_async(const at::Tensor& output, const at::Tensor& input,
                                   const AllToAllOptions& options = {}) = 0;
  virtual WorkPtr barrier_async(const BarrierOptions& options = {}) = 0;

  // Collective over this Comm: the ranks that pass the same `color` (>= 0)
  // form a new Comm, ranked in this Comm's order, with this Comm's backend,
  // device and timeout (sequence parallelism's groups). Ops already issued
  // on this Comm complete first.
  virtual std::unique_ptr<Comm> split(int color) = 0;

  // Blocking forms: issue, then wait.
  void all_reduce(const at::Tensor& tensor, const AllReduceOptions& options = {}) {
    all_reduce_async(tensor, options)->wait();
  }
  void broadcast(const at::Tensor& tensor, const BroadcastOptions& options = {}) {
    broadcast_async(tensor, options)->wait();
  }
  void all_gather(const at::Tensor& output, const at::Tensor& input, const AllGatherOptions& options = {}) {
    all_gather_async(output, input, options)->wait();
  }
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input, const ReduceScatterOptions& options = {}) {
    reduce_scatter_async(output, input, options)->wait();
  }
  void all_to_all(const at::Tensor& output, const at::Tensor& input, const AllToAllOptions& options = {}) {
    all_to_all_async(output, input, options)->wait();
  }
  void barrier(const BarrierOptions& options = {}) { barrier_async(options)->wait(); }
};

}  // namespace wt::distributed
