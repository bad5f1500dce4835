#include "wantrain/distributed/nccl_comm.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <exception>
#include <vector>

#include "wantrain/distributed/cuda_check.hpp"
#include "wantrain/distributed/cuda_libraries.hpp"
#include "wantrain/distributed/watchdog.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/exit_codes.hpp"
#include "wantrain/util/fatal.hpp"
#include "wantrain/util/poll.hpp"
#include "wantrain/util/reporter.hpp"
#include "wantrain/util/test_hooks.hpp"
#include "wantrain/config.hpp"
#include "wantrain/distributed/abort.hpp"
#include "wantrain/distributed/mpi_check.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace wt::distributed {

// The non-blocking communicator (ncclConfig_t, ncclInProgress,
// ncclCommFinalize) is NCCL 2.14's; CMake asks for it too.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "wantrain's NCCL backend needs NCCL 2.14 or newer"
#endif

static_assert(sizeof(ncclUniqueId) == std::tuple_size<NcclUniqueIdBytes>::value,
              "NcclUniqueIdBytes must hold an ncclUniqueId");

bool nccl_built() { return true; }

std::string nccl_unavailable_reason() {
  std::string why_not;
  cuda_api(&why_not);
  return why_not;
}

int cuda_device_count() {
  std::string why_not;
  const CudaApi* api = cuda_api(&why_not);
  if (api == nullptr) {
    // No driver (a CPU node) or WANTRAIN_CUDA=off: no device, as asked. A
    // driver whose libraries did not load would silently make a GPU node a
    // CPU one: that is said.
    if (load_cuda_libraries().wanted) report_warning("CUDA cannot be used: {}", why_not);
    return 0;
  }
  int count = 0;
  const cudaError_t rc = api->cudaGetDeviceCount(&count);
  if (rc == cudaSuccess) return count;
  api->cudaGetLastError();  // clear the error, report no device
  // No device is ordinary where the libraries were loaded without a driver
  // (WANTRAIN_CUDA=on); anything else (a driver older than this CUDA
  // runtime, say) would silently turn GPU nodes into CPU ones.
  if (rc != cudaErrorNoDevice && rc != cudaErrorInsufficientDriver)
    report_warning("CUDA reports no usable device: {} ({})", api->cudaGetErrorString(rc), api->cudaGetErrorName(rc));
  return 0;
}

double cuda_device_memory_bytes(int device) {
  const CudaApi* api = cuda_api();
  if (api == nullptr) return 0;
  cudaDeviceProp properties{};
  if (api->cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    api->cudaGetLastError();
    return 0;
  }
  return double(properties.totalGlobalMem);
}

double cuda_device_memory_in_use_bytes(int device) {
  const CudaApi* api = cuda_api();
  if (api == nullptr) return 0;
  int current = 0;
  if (api->cudaGetDevice(&current) != cudaSuccess) {
    api->cudaGetLastError();
    return 0;
  }
  // cudaMemGetInfo answers for the current device.
  if (current != device && api->cudaSetDevice(device) != cudaSuccess) {
    api->cudaGetLastError();
    return 0;
  }
  size_t free = 0, total = 0;
  const bool read = api->cudaMemGetInfo(&free, &total) == cudaSuccess;
  if (!read) api->cudaGetLastError();
  if (current != device) api->cudaSetDevice(current);
  return read ? double(total - free) : 0.0;
}

RankDevice this_rank_device(const World& world) {
  RankDevice mine;
  if (!WANTRAIN_TORCH_HAS_CUDA) {
    mine.why_none = "this LibTorch has no CUDA support; build wantrain against a CUDA LibTorch";
    return mine;
  }
  const int devices = cuda_device_count();
  if (devices == 0) {
    mine.why_none = "no CUDA device is visible";
    return mine;
  }
  // The node-local rank's device among those this rank sees: all of the
  // node's GPUs (rank i takes cuda:i), its own one (srun --gpus-per-task=1:
  // cuda:0) or its own few (--gpus-per-task=N). Ranks that land on one GPU
  // this way (more ranks than GPUs, one CUDA_VISIBLE_DEVICES for all) are
  // told apart by the bus ids: place_gpus names them.
  mine.ordinal = world.local_rank() % devices;
  char bus_id[32] = {};
  if (cu().cudaDeviceGetPCIBusId(bus_id, int(sizeof bus_id), mine.ordinal) == cudaSuccess) {
    mine.bus_id = bus_id;
  } else {
    cu().cudaGetLastError();  // no bus id: the ordinal alone then names the device
  }
  return mine;
}

NcclUniqueIdBytes broadcast_nccl_unique_id(const World& world) {
  NcclUniqueIdBytes bytes{};
  if (world.rank() == 0) {
    ncclUniqueId id;
    NCCL_CHECK(cu().ncclGetUniqueId(&id));
    std::memcpy(bytes.data(), &id, sizeof id);
  }
  MPI_CHECK(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, world.comm()));
  return bytes;
}

namespace {

// The stream the caller's kernels run on: LibTorch's current stream on the
// device (through c10's device-generic interface, which c10_cuda implements).
cudaStream_t compute_stream(int device) {
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  return static_cast<cudaStream_t>(
      cuda.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device))).native_handle());
}

ncclDataType_t nccl_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    default: throw Error(fmt::format("NcclComm: dtype {} is not supported", c10::toString(dtype)));
  }
}

ncclRedOp_t nccl_op(at::ScalarType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg:
      if (!at::isFloatingType(dtype))
        throw Error(fmt::format("NcclComm: avg is defined for floating dtypes, not {}", c10::toString(dtype)));
      return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  throw Error("unknown ReduceOp");
}

// A collective queued on the NCCL stream; `done` is recorded after it.
class NcclWork final : public Work {
 public:
  NcclWork(int device, cudaStream_t stream, std::vector<at::Tensor> keep_alive, bool host_blocking)
      : device_(device), host_blocking_(host_blocking), keep_alive_(std::move(keep_alive)) {
    CUDA_CHECK(cu().cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    CUDA_CHECK(cu().cudaEventRecord(done_, stream));
  }
  ~NcclWork() override {
    cu().cudaSetDevice(device_);  // may run on the watchdog's thread
    cu().cudaEventDestroy(done_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  void wait() override {
    CUDA_CHECK(cu().cudaSetDevice(device_));
    if (host_blocking_)
      CUDA_CHECK(cu().cudaEventSynchronize(done_));
    else
      CUDA_CHECK(cu().cudaStreamWaitEvent(compute_stream(device_), done_, 0));
  }
  bool completed() override { return query() == cudaSuccess; }

  // cudaSuccess (done), cudaErrorNotReady (running) or the CUDA error that stopped it.
  cudaError_t query() const {
    cu().cudaSetDevice(device_);
    return cu().cudaEventQuery(done_);
  }

 private:
  int device_;
  bool host_blocking_;
  cudaEvent_t done_ = nullptr;
  std::vector<at::Tensor> keep_alive_;  // the tensors live until the op is done
};

class NcclComm final : public Comm {
 public:
  NcclComm(const World& world, const GpuPlacement& placement, CommOptions options)
      : rank_(world.rank()), size_(world.size()), timeout_(options.timeout) {
    // Every rank holds the same placement: all refuse together, before the
    // id broadcast, and the lowest rank says why.
    world.agree([&] {
      if (!placement.usable()) throw SettingError("backend", "nccl: " + placement.problem);
    });
    device_ = placement.ranks.at(size_t(rank_)).ordinal;
    CUDA_CHECK(cu().cudaSetDevice(device_));
    const NcclUniqueIdBytes bytes = broadcast_nccl_unique_id(world);
    ncclUniqueId id;
    std::memcpy(&id, bytes.data(), sizeof id);
    // Non-blocking: the join is polled against the comm timeout, so a peer
    // that never arrives (or a wrong NCCL_SOCKET_IFNAME) ends the job with
    // one line instead of hanging it in ncclCommInitRank.
    test_delay("nccl_join");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t joined = cu().ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (joined != ncclSuccess && joined != ncclInProgress) {
      if (comm_ != nullptr) cu().ncclCommAbort(comm_);
      abort_job(fmt::format("NCCL could not create its communicator on {} ({}): {}", world.host(),
                            placement.ranks[size_t(rank_)].describe(), cu().ncclGetErrorString(joined)),
                kExitFailure);
    }
    joining_ = true;
    settle(fmt::format("communicator creation on {} ({})", world.host(), placement.ranks[size_t(rank_)].describe()));
    joining_ = false;
    CUDA_CHECK(cu().cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cu().cudaMalloc(&barrier_buffer_, sizeof(float)));
    watchdog_ =
        std::make_unique<Watchdog>("NCCL", options.timeout, [this](const std::string& message) { fail(message); });
  }

  // Collective over `parent`: ncclCommSplit, non-blocking and settled as the join is.
  NcclComm(NcclComm& parent, int color) : rank_(0), size_(0), timeout_(parent.timeout_), device_(parent.device_) {
    if (color < 0) throw Error(fmt::format("NcclComm split: color {} is negative", color));
    CUDA_CHECK(cu().cudaSetDevice(device_));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t asked = cu().ncclCommSplit(parent.comm_, color, parent.rank_, &comm_, &config);
    if (asked != ncclSuccess && asked != ncclInProgress)
      parent.fail(fmt::format("NCCL could not split its communicator: {}", cu().ncclGetErrorString(asked)));
    joining_ = true;
    settle(fmt::format("communicator split (color {})", color));
    joining_ = false;
    if (cu().ncclCommUserRank(comm_, &rank_) != ncclSuccess || cu().ncclCommCount(comm_, &size_) != ncclSuccess)
      fail("NCCL could not read the split communicator's rank and size");
    CUDA_CHECK(cu().cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cu().cudaMalloc(&barrier_buffer_, sizeof(float)));
    watchdog_ = std::make_unique<Watchdog>("NCCL", timeout_, [this](const std::string& message) { fail(message); });
  }

  ~NcclComm() override {
    if (std::uncaught_exceptions() > 0) {
      // Unwinding to MPI_Abort: queued ops may wait for peers that are gone.
      watchdog_.reset();
      cu().ncclCommAbort(comm_);
      return;
    }
    // Let issued ops finish, stop watching, then release in reverse order.
    cu().cudaSetDevice(device_);
    cu().cudaStreamSynchronize(stream_);
    watchdog_.reset();
    cu().cudaFree(barrier_buffer_);
    cu().cudaStreamDestroy(stream_);
    // A non-blocking communicator finalizes asynchronously: flush, then free.
    if (cu().ncclCommFinalize(comm_) == ncclInProgress) settle("finalize");
    cu().ncclCommDestroy(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  const char* backend() const override { return "NCCL"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  at::Device device() const override { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_)); }

  WorkPtr all_reduce_async(const at::Tensor& t, const AllReduceOptions& options) override {
    check("all_reduce", t);
    const ncclDataType_t type = nccl_type(t.scalar_type());
    const ncclRedOp_t op = nccl_op(t.scalar_type(), options.op);
    return launch(fmt::format("all_reduce #{} ({} x {}, {})", seq_++, c10::toString(t.scalar_type()), t.numel(),
                              to_string(options.op)),
                  {t}, [&](cudaStream_t s) {
                    return cu().ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, op, comm_, s);
                  });
  }

  WorkPtr broadcast_async(const at::Tensor& t, const BroadcastOptions& options) override {
    check("broadcast", t);
    if (options.root < 0 || options.root >= size_)
      throw Error(fmt::format("NcclComm broadcast: root {} is not a rank of this {}-rank world", options.root, size_));
    const ncclDataType_t type = nccl_type(t.scalar_type());
    return launch(fmt::format("broadcast #{} ({} x {}, root {})", seq_++, c10::toString(t.scalar_type()), t.numel(),
                              options.root),
                  {t}, [&](cudaStream_t s) {
                    return cu().ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), type, options.root, comm_, s);
                  });
  }

  WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input, const AllGatherOptions&) override {
    check("all_gather", input);
    check("all_gather", output);
    if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size_)
      throw Error(fmt::format("NcclComm all_gather: output must be {} x {} elements of the input's dtype", size_,
                              input.numel()));
    const ncclDataType_t type = nccl_type(input.scalar_type());
    return launch(fmt::format("all_gather #{} ({} x {})", seq_++, c10::toString(input.scalar_type()), input.numel()),
                  {output, input}, [&](cudaStream_t s) {
                    return cu().ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type, comm_, s);
                  });
  }

  WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                               const ReduceScatterOptions& options) override {
    check("reduce_scatter", input);
    check("reduce_scatter", output);
    if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * size_)
      throw Error(fmt::format("NcclComm reduce_scatter: input must be {} x {} elements of the output's dtype", size_,
                              output.numel()));
    const ncclDataType_t type = nccl_type(input.scalar_type());
    const ncclRedOp_t op = nccl_op(input.scalar_type(), options.op);
    return launch(fmt::format("reduce_scatter #{} ({} x {}, {})", seq_++, c10::toString(input.scalar_type()),
                              input.numel(), to_string(options.op)),
                  {output, input}, [&](cudaStream_t s) {
                    return cu().ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type, op, comm_,
                                                  s);
                  });
  }

  // Grouped point-to-point sends and receives (NCCL >= 2.7 has them; the
  // native ncclAlltoAll only 2.28): chunk j to rank j, chunk i from rank i.
  WorkPtr all_to_all_async(const at::Tensor& output, const at::Tensor& input, const AllToAllOptions&) override {
    check("all_to_all", input);
    check("all_to_all", output);
    if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() || input.numel() % size_ != 0)
      throw Error(fmt::format("NcclComm all_to_all: input and output must both be {} chunks of equal size of one dtype",
                              size_));
    if (input.data_ptr() == output.data_ptr()) throw Error("NcclComm all_to_all: not in place");
    const ncclDataType_t type = nccl_type(input.scalar_type());
    const size_t count = size_t(input.numel() / size_);
    const size_t chunk_bytes = count * input.element_size();
    return launch(fmt::format("all_to_all #{} ({} x {})", seq_++, c10::toString(input.scalar_type()), input.numel()),
                  {output, input}, [&](cudaStream_t s) {
                    const char* in = static_cast<const char*>(input.data_ptr());
                    char* out = static_cast<char*>(output.data_ptr());
                    ncclResult_t r = cu().ncclGroupStart();
                    for (int peer = 0; peer < size_ && r == ncclSuccess; ++peer) {
                      r = cu().ncclSend(in + peer * chunk_bytes, count, type, peer, comm_, s);
                      if (r == ncclSuccess) r = cu().ncclRecv(out + peer * chunk_bytes, count, type, peer, comm_, s);
                    }
                    const ncclResult_t ended = cu().ncclGroupEnd();
                    return r != ncclSuccess ? r : ended;
                  });
  }

  std::unique_ptr<Comm> split(int color) override { return std::make_unique<NcclComm>(*this, color); }

  // NCCL has no barrier: an all-reduce of one float stands in for it, and
  // its wait() blocks the host until it is done.
  WorkPtr barrier_async(const BarrierOptions&) override {
    return launch(
        fmt::format("barrier #{}", seq_++), {},
        [&](cudaStream_t s) {
          return cu().ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_, s);
        },
        /*host_blocking=*/true);
  }

 private:
  void check(const char* op, const at::Tensor& t) const {
    if (!t.defined()) throw Error(fmt::format("NcclComm {}: undefined tensor", op));
    if (!t.is_cuda() || t.device().index() != device_)
      throw Error(fmt::format("NcclComm {}: tensor is on {}, this rank's NCCL device is cuda:{}", op, t.device().str(),
                              device_));
    if (!t.is_contiguous()) throw Error(fmt::format("NcclComm {}: tensor is not contiguous", op));
  }

  // Ends the job once, whichever thread sees the failure first (the
  // watchdog and the main thread can both see one asynchronous error): the
  // other waits for MPI_Abort to end the process. `abort_nccl` false for a
  // join that never finished: ncclCommAbort could wait on it in turn, and
  // MPI_Abort frees everything anyway.
  [[noreturn]] void fail(const std::string& message, bool abort_nccl = true) {
    if (failing_.exchange(true))
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (abort_nccl) cu().ncclCommAbort(comm_);
    abort_job(message, kExitFailure);
  }

  // A non-blocking communicator answers ncclInProgress while NCCL finishes a
  // call in the background: wait for its state to leave that, at most the
  // comm timeout; an error or the timeout aborts the communicator and ends
  // the job with one line.
  void settle(const std::string& what) {
    const bool settled = poll_until(
        [&] {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t asked = cu().ncclCommGetAsyncError(comm_, &state);
          if (asked != ncclSuccess) state = asked;
          if (state != ncclSuccess && state != ncclInProgress)
            fail(fmt::format("NCCL {} failed: {} ({})", what, cu().ncclGetErrorString(state),
                             cu().ncclGetLastError(comm_)));
          return state == ncclSuccess;
        },
        timeout_);
    if (!settled)
      fail(fmt::format("NCCL {} did not complete within {:g} s ({}): a peer is stuck or unreachable (check "
                       "NCCL_SOCKET_IFNAME and that every rank started)",
                       what, std::chrono::duration<double>(timeout_).count(), setting_reference("comm_timeout")),
           /*abort_nccl=*/!joining_);
  }

  template <class Call>
  WorkPtr launch(std::string description, std::vector<at::Tensor> keep_alive, Call call, bool host_blocking = false) {
    CUDA_CHECK(cu().cudaSetDevice(device_));
    // The op must see what the compute stream has queued so far.
    cudaEvent_t ready = nullptr;
    CUDA_CHECK(cu().cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cu().cudaEventRecord(ready, compute_stream(device_)));
    CUDA_CHECK(cu().cudaStreamWaitEvent(stream_, ready, 0));
    CUDA_CHECK(cu().cudaEventDestroy(ready));
    const ncclResult_t queued = call(stream_);
    if (queued == ncclInProgress)
      settle(description);  // non-blocking: enqueued once the state is no longer in progress
    else if (queued != ncclSuccess)
      fail(fmt::format("NCCL {} could not be queued: {} ({})", description, cu().ncclGetErrorString(queued),
                       cu().ncclGetLastError(comm_)));
    auto work = std::make_shared<NcclWork>(device_, stream_, std::move(keep_alive), host_blocking);
    // The watchdog holds the Work (and so its tensors) until the op is done,
    // and ends the job at once on an asynchronous NCCL or CUDA error.
    watchdog_->watch(description, [this, work, description] {
      ncclResult_t async_error = ncclSuccess;
      if (cu().ncclCommGetAsyncError(comm_, &async_error) == ncclSuccess && async_error != ncclSuccess &&
          async_error != ncclInProgress)
        fail(fmt::format("NCCL {} failed: {}", description, cu().ncclGetErrorString(async_error)));
      const cudaError_t state = work->query();
      if (state != cudaSuccess && state != cudaErrorNotReady)
        fail(fmt::format("NCCL {}: CUDA error {}", description, cu().cudaGetErrorString(state)));
      return state == cudaSuccess;
    });
    return work;
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_buffer_ = nullptr;  // [1] float
  std::uint64_t seq_ = 0;
  bool joining_ = false;              // in the join: a timeout does not ncclCommAbort
  std::atomic<bool> failing_{false};  // fail() runs once
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const World& world, const GpuPlacement& placement, CommOptions options) {
  return std::make_unique<NcclComm>(world, placement, options);
}

}  // namespace wt::distributed
