// NcclComm: Comm over NCCL, for CUDA tensors on this rank's GPU.
//
// Contract: collective construction on every rank of the World; then Comm's
// contract. Rank 0 creates the ncclUniqueId, MPI_Bcast hands its bytes to
// every rank, and each rank joins (ncclCommInitRankConfig, non-blocking,
// polled under the comm timeout) on its own GPU, which place_gpus has
// checked no other rank takes. Collectives run on a CUDA stream the NcclComm
// owns; each op first waits (with an event) for the work already queued on
// the caller's current compute stream, and Work::wait() makes the compute
// stream wait for the op: the host does not block (except for barrier(),
// whose wait() blocks the host as a barrier must). Called from one host
// thread at a time. A timeout, an asynchronous NCCL error or a CUDA error
// seen by the watchdog aborts the NCCL communicator and ends the job.
//
// Compiled only when WANTRAIN_NCCL_ENABLED; without it, make_nccl_comm()
// reports that the build has no NCCL (nccl_absent.cpp), so callers never
// need an #if of their own.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/device_placement.hpp"

namespace wt::distributed {

class World;

// Whether this build contains the NCCL backend.
bool nccl_built();

// Why the NCCL backend cannot call the CUDA runtime and NCCL in this
// process (it looks their functions up in what LibTorch's CUDA backend
// loaded: cuda_libraries.hpp); empty when it can.
std::string nccl_unavailable_reason();

// CUDA devices visible to this process (0 without a driver, a device or NCCL).
int cuda_device_count();

// A CUDA device's total memory in bytes (0 when it cannot be read, or in a
// build without NCCL): the capacity the memory plan is compared against.
double cuda_device_memory_bytes(int device);

// Bytes in use on a CUDA device now (cudaMemGetInfo: total - free, so what
// LibTorch's caching allocator holds, the CUDA context and any other process
// on it); 0 when it cannot be read or without NCCL. Sampled at log steps for
// the run's peak device memory.
double cuda_device_memory_in_use_bytes(int device);

// The GPU this rank would take (rank and host left for the caller): device
// (node-local rank mod the devices it sees), so rank i of a node takes
// cuda:i when every rank sees all GPUs, and cuda:0 when the launcher gives
// each rank its own (srun --gpus-per-task=1); none, with the reason, without
// CUDA in this build or LibTorch, or without a visible device. Whether
// another rank took the same device is place_gpus' question
// (device_placement.hpp).
RankDevice this_rank_device(const World& world);

// Collective: rank 0's fresh ncclUniqueId, as bytes, on every rank.
using NcclUniqueIdBytes = std::array<char, 128>;
NcclUniqueIdBytes broadcast_nccl_unique_id(const World& world);

// Collective: an NCCL communicator over the whole World, each rank on its
// device of `placement` (place_gpus). A placement that is not usable is a
// UsageError naming --backend on every rank. The communicator is created
// non-blocking and polled: a join that does not finish within
// options.timeout (a peer that never arrives, a wrong NCCL_SOCKET_IFNAME) is
// aborted with one line, never a hang.
std::unique_ptr<Comm> make_nccl_comm(const World& world, const GpuPlacement& placement, CommOptions options);

}  // namespace wt::distributed
