// NcclComm: Comm over NCCL, for CUDA tensors on this rank's GPU.
//
// Contract: collective construction on every rank of the World; then Comm's
// contract. Rank 0 creates the ncclUniqueId, MPI_Bcast hands its bytes to
// every rank, and each rank joins with ncclCommInitRank on the GPU whose
// index is its node-local rank. Collectives run on a CUDA stream the NcclComm
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

#include "wantrain/distributed/comm.hpp"

namespace wt::distributed {

class World;

// Whether this build contains the NCCL backend.
bool nccl_built();

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

// The GPU this rank uses: its node-local rank, or 0 when the launcher gave
// each rank a single visible GPU (srun --gpus-per-task=1); -1 when there is
// none for it (more ranks on the node than visible GPUs).
int nccl_device_for(const World& world);

// Whether NCCL can serve this rank: built, LibTorch has CUDA, and a GPU for it.
bool nccl_usable(const World& world);

// Collective: rank 0's fresh ncclUniqueId, as bytes, on every rank.
using NcclUniqueIdBytes = std::array<char, 128>;
NcclUniqueIdBytes broadcast_nccl_unique_id(const World& world);

// Collective: an NCCL communicator over the whole World.
std::unique_ptr<Comm> make_nccl_comm(const World& world, CommOptions options);

}  // namespace wt::distributed
