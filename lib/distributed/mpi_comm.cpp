#include "wantrain/distributed/mpi_comm.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <climits>
#include <exception>

#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt::distributed {

namespace {

bool is_half(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

void check_tensor(const char* op, const char* role, const at::Tensor& t) {
  if (!t.defined()) throw Error(fmt::format("MpiComm {}: {} tensor is undefined", op, role));
  if (!t.device().is_cpu())
    throw Error(fmt::format("MpiComm {}: {} tensor is on {}, MpiComm takes CPU tensors", op, role, t.device().str()));
  if (!t.is_contiguous()) throw Error(fmt::format("MpiComm {}: {} tensor is not contiguous", op, role));
  mpi_datatype(t.scalar_type());
}

void check_reduce_op(const char* op, at::ScalarType dtype, ReduceOp reduce) {
  if (reduce == ReduceOp::Avg && !at::isFloatingType(dtype))
    throw Error(fmt::format("MpiComm {}: avg is defined for floating dtypes, not {}", op, c10::toString(dtype)));
}

int checked_count(const char* op, int64_t count) {
  if (count > INT_MAX)
    throw Error(fmt::format("MpiComm {}: {} elements per rank exceed MPI's int count limit", op, count));
  return static_cast<int>(count);
}

std::string describe(const char* op, std::uint64_t seq, const at::Tensor& t, const std::string& extra = {}) {
  return fmt::format("{} #{} ({} x {}{})", op, seq, c10::toString(t.scalar_type()), t.numel(), extra);
}

// Runs fn(offset, count) over [0, n) in pieces of at most `max_count`
// elements (MPI counts are int, and very large single messages have been
// fragile in MPI libraries); once with count 0 for an empty tensor, as every
// rank must call.
template <class Fn>
void in_chunks(int64_t n, int64_t max_count, Fn fn) {
  int64_t offset = 0;
  do {
    const int count = static_cast<int>(std::min<int64_t>(n - offset, max_count));
    fn(offset, count);
    offset += count;
  } while (offset < n);
}

// Waits for `request` without holding a core while the rank computes: the
// worker thread shares the rank's cores with the compute threads (backward
// runs while buckets are reduced), and a blocking MPI call would spin on one
// while the peers are still computing. So unless a thread is waiting for the
// result (nothing else to run), it sleeps between polls, longer the longer it
// waits (up to 50 us: a bucket finishes at most that late). Transfers
// progress inside MPI_Test.
void wait_for(MPI_Request& request, const std::atomic<int>& waiters) {
  int done = 0;
  auto pause = std::chrono::microseconds(5);
  for (int polls = 0;; ++polls) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls < 64 || waiters.load(std::memory_order_relaxed) > 0) continue;  // small ops finish at once
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(50));
  }
}

}  // namespace

MPI_Datatype mpi_datatype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBFloat16:
    case at::kHalf: return MPI_UINT16_T;  // reduced by HalfReduceOps
    default:
      throw Error(
          fmt::format("MpiComm: dtype {} is not supported (float32, float64, bfloat16, float16, int32, "
                      "int64, uint8 are)",
                      c10::toString(dtype)));
  }
}

class MpiComm::MpiWork final : public Work {
 public:
  MpiWork(std::vector<at::Tensor> keep_alive, std::shared_ptr<std::atomic<int>> waiters)
      : keep_alive_(std::move(keep_alive)), waiters_(std::move(waiters)) {}
  void wait() override {
    ++*waiters_;
    struct Leave {
      std::atomic<int>& waiters;
      ~Leave() { --waiters; }
    } leave{*waiters_};
    // Yield before sleeping: the worker finishing now is the common case,
    // and a condition variable's wake-up costs a futex round trip on each
    // side (about 10 us per op, measured: 0.89 of raw MPI's busbw at 1 MiB).
    // Yielding, not spinning bare, leaves the core to the worker when both
    // share it. Past kSpin the op is long and a sleep costs nothing.
    constexpr auto kSpin = std::chrono::milliseconds(1);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if (done_.load(std::memory_order_acquire)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return done_.load(); });
  }
  bool completed() override { return done_.load(); }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      keep_alive_.clear();  // before done_: a waiter may return as soon as it is set
      done_ = true;
    }
    done_cv_.notify_all();
  }

 private:
  std::vector<at::Tensor> keep_alive_;
  std::shared_ptr<std::atomic<int>> waiters_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
};

MpiComm::MpiComm(const World& world, CommOptions options, int64_t max_chunk_bytes)
    : options_(options), max_chunk_bytes_(max_chunk_bytes), watchdog_("MPI", options.timeout) {
  MPI_CHECK(MPI_Comm_dup(world.comm(), &comm_));
  start();
}

MpiComm::MpiComm(MPI_Comm comm, CommOptions options, int64_t max_chunk_bytes)
    : comm_(comm), options_(options), max_chunk_bytes_(max_chunk_bytes), watchdog_("MPI", options.timeout) {
  start();
}

void MpiComm::start() {
  if (max_chunk_bytes_ < 1) throw Error("MpiComm: max_chunk_bytes must be positive");
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  worker_ = std::thread([this] { worker_loop(); });
}

// On the worker, in issue order: MPI_Comm_split is a collective on comm_,
// which no other thread may be using for one at the same time.
std::unique_ptr<Comm> MpiComm::split(int color) {
  if (color < 0) throw Error(fmt::format("MpiComm split: color {} is negative", color));
  auto part = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  enqueue(fmt::format("split #{} (color {})", next_seq_++, color), {}, [this, part, color] {
    MPI_CHECK(MPI_Comm_split(comm_, color, rank_, part.get()));
  })->wait();
  return std::make_unique<MpiComm>(*part, options_, max_chunk_bytes_);
}

MpiComm::~MpiComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    // Unwinding from an error, on the way to MPI_Abort: ops not yet started
    // are dropped, as their peers may be gone. An op already running is
    // waited for; if its peers never join it, the watchdog (still alive until
    // the worker is joined) ends the job after the timeout.
    if (std::uncaught_exceptions() > 0) queue_.clear();
  }
  wake_.notify_all();
  worker_.join();
  MPI_Comm_free(&comm_);
}

void MpiComm::worker_loop() {
  at::init_num_threads();  // the intra-op thread count set for the process, not every core
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    watchdog_.watch(task.description, [work = task.work] { return work->completed(); });
    try {
      task.run();
    } catch (const std::exception& e) {
      abort_job(fmt::format("MPI {} failed: {}", task.description, e.what()), kExitFailure);
    }
    task.work->finish();
  }
}

WorkPtr MpiComm::enqueue(std::string description, std::vector<at::Tensor> keep_alive, std::function<void()> run) {
  auto work = std::make_shared<MpiWork>(std::move(keep_alive), waiters_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(description), std::move(run), work});
  }
  wake_.notify_one();
  return work;
}

int64_t MpiComm::chunk_elements(const at::Tensor& t) const {
  return std::clamp<int64_t>(max_chunk_bytes_ / t.element_size(), 1, INT_MAX);
}

MPI_Op MpiComm::native_op(at::ScalarType dtype, ReduceOp op) const {
  if (is_half(dtype)) return half_ops_.get(dtype, op);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  throw Error("unknown ReduceOp");
}

WorkPtr MpiComm::all_reduce_async(const at::Tensor& tensor, const AllReduceOptions& options) {
  check_tensor("all_reduce", "the", tensor);
  check_reduce_op("all_reduce", tensor.scalar_type(), options.op);
  const MPI_Datatype type = mpi_datatype(tensor.scalar_type());
  const MPI_Op op = native_op(tensor.scalar_type(), options.op);
  const bool average = options.op == ReduceOp::Avg;
  const bool polite = options.overlaps_compute;
  return enqueue(describe("all_reduce", next_seq_++, tensor, fmt::format(", {}", to_string(options.op))), {tensor},
                 [this, tensor, type, op, average, polite] {
                   char* base = static_cast<char*>(tensor.data_ptr());
                   const int64_t item = tensor.element_size();
                   in_chunks(tensor.numel(), chunk_elements(tensor), [&](int64_t offset, int count) {
                     if (!polite) {
                       MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, base + offset * item, count, type, op, comm_));
                       return;
                     }
                     MPI_Request request;
                     MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, base + offset * item, count, type, op, comm_, &request));
                     wait_for(request, *waiters_);
                   });
                   if (average) tensor.detach().div_(size_);  // detach: grad mode is on in this thread
                 });
}

WorkPtr MpiComm::broadcast_async(const at::Tensor& tensor, const BroadcastOptions& options) {
  check_tensor("broadcast", "the", tensor);
  if (options.root < 0 || options.root >= size_)
    throw Error(fmt::format("MpiComm broadcast: root {} is not a rank of this {}-rank world", options.root, size_));
  const MPI_Datatype type = mpi_datatype(tensor.scalar_type());
  const int root = options.root;
  return enqueue(describe("broadcast", next_seq_++, tensor, fmt::format(", root {}", root)), {tensor},
                 [this, tensor, type, root] {
                   char* base = static_cast<char*>(tensor.data_ptr());
                   const int64_t item = tensor.element_size();
                   in_chunks(tensor.numel(), chunk_elements(tensor), [&](int64_t offset, int count) {
                     MPI_CHECK(MPI_Bcast(base + offset * item, count, type, root, comm_));
                   });
                 });
}

WorkPtr MpiComm::all_gather_async(const at::Tensor& output, const at::Tensor& input, const AllGatherOptions&) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size_)
    throw Error(fmt::format("MpiComm all_gather: output must be {} x {} elements of {}, got {} of {}", size_,
                            input.numel(), c10::toString(input.scalar_type()), output.numel(),
                            c10::toString(output.scalar_type())));
  const MPI_Datatype type = mpi_datatype(input.scalar_type());
  const int count = checked_count("all_gather", input.numel());
  const char* out_begin = static_cast<const char*>(output.data_ptr());
  const char* in_begin = static_cast<const char*>(input.data_ptr());
  const int64_t in_bytes = input.numel() * input.element_size();
  const bool in_place = in_begin == out_begin + int64_t(rank_) * in_bytes;
  if (!in_place && in_begin < out_begin + output.numel() * output.element_size() && out_begin < in_begin + in_bytes)
    throw Error("MpiComm all_gather: the input overlaps the output without being this rank's row of it");
  return enqueue(describe("all_gather", next_seq_++, input, in_place ? ", in place" : ""), {output, input},
                 [this, output, input, type, count, in_place] {
                   MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : input.data_ptr(), count, type, output.data_ptr(),
                                           count, type, comm_));
                 });
}

WorkPtr MpiComm::reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                      const ReduceScatterOptions& options) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  check_reduce_op("reduce_scatter", input.scalar_type(), options.op);
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * size_)
    throw Error(fmt::format("MpiComm reduce_scatter: input must be {} x {} elements of {}, got {} of {}", size_,
                            output.numel(), c10::toString(output.scalar_type()), input.numel(),
                            c10::toString(input.scalar_type())));
  const MPI_Datatype type = mpi_datatype(input.scalar_type());
  const MPI_Op op = native_op(input.scalar_type(), options.op);
  const int count = checked_count("reduce_scatter", output.numel());
  const bool average = options.op == ReduceOp::Avg;
  const bool polite = options.overlaps_compute;
  return enqueue(
      describe("reduce_scatter", next_seq_++, input, fmt::format(", {}", to_string(options.op))), {output, input},
      [this, output, input, type, op, count, average, polite] {
        if (polite) {
          MPI_Request request;
          MPI_CHECK(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count, type, op, comm_, &request));
          wait_for(request, *waiters_);
        } else {
          MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), count, type, op, comm_));
        }
        if (average) output.detach().div_(size_);
      });
}

WorkPtr MpiComm::all_to_all_async(const at::Tensor& output, const at::Tensor& input, const AllToAllOptions&) {
  check_tensor("all_to_all", "input", input);
  check_tensor("all_to_all", "output", output);
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() || input.numel() % size_ != 0)
    throw Error(fmt::format(
        "MpiComm all_to_all: input and output must both be {} chunks of equal size of one dtype, "
        "got {} of {} and {} of {}",
        size_, input.numel(), c10::toString(input.scalar_type()), output.numel(), c10::toString(output.scalar_type())));
  const char* out_begin = static_cast<const char*>(output.data_ptr());
  const char* in_begin = static_cast<const char*>(input.data_ptr());
  const int64_t bytes = input.numel() * input.element_size();
  if (in_begin < out_begin + bytes && out_begin < in_begin + bytes)
    throw Error("MpiComm all_to_all: the input overlaps the output");
  const MPI_Datatype type = mpi_datatype(input.scalar_type());
  const int count = checked_count("all_to_all", input.numel() / size_);
  return enqueue(describe("all_to_all", next_seq_++, input), {output, input}, [this, output, input, type, count] {
    MPI_CHECK(MPI_Alltoall(input.data_ptr(), count, type, output.data_ptr(), count, type, comm_));
  });
}

WorkPtr MpiComm::barrier_async(const BarrierOptions&) {
  return enqueue(fmt::format("barrier #{}", next_seq_++), {}, [this] { MPI_CHECK(MPI_Barrier(comm_)); });
}

}  // namespace wt::distributed
