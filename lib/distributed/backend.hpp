// Choosing and making the Comm: --backend auto|mpi|nccl.
#pragma once

#include <memory>
#include <string>

#include "wantrain/distributed/comm.hpp"
#include "wantrain/distributed/device_placement.hpp"

namespace wt::distributed {

class World;

enum class Backend { Auto, Mpi, Nccl };

const char* to_string(Backend backend);

// What `requested` comes to, the same on every rank.
struct BackendChoice {
  Backend requested = Backend::Auto;
  Backend backend = Backend::Mpi;  // mpi or nccl, never auto
  GpuPlacement placement;          // every rank's GPU (empty for a requested mpi)
  // With auto: why NCCL was passed over although some rank sees a GPU (two
  // ranks on one GPU, a rank without one); "" otherwise. One warning line.
  std::string fallback;
};

// Collective: auto becomes nccl when NCCL can serve every rank (built, CUDA
// LibTorch, a GPU of its own for each rank), else mpi; mpi and nccl stay.
BackendChoice choose_backend(const World& world, Backend requested);
Backend resolve_backend(const World& world, Backend requested);

// Collective: the Comm for `backend` (resolved first if auto) over the World.
// Rank 0 reports (util/reporter.hpp) the fallback warning of an auto that could not have NCCL; an
// explicit nccl that cannot be served is a UsageError naming --backend and
// the ranks and device in the way.
std::unique_ptr<Comm> make_comm(const World& world, Backend backend, CommOptions options = {});
// The same for a choice already made, without the warning (the caller says
// it, e.g. with cpu_on_gpu_nodes).
std::unique_ptr<Comm> make_comm(const World& world, const BackendChoice& choice, CommOptions options = {});

// Collective: why this job computes on the CPU although NVIDIA GPUs sit in
// its nodes, in one line the same on every rank; "" when it runs on GPUs or
// its nodes have none. A CPU-only build or LibTorch, --backend mpi, or an
// auto that fell back (two ranks on one GPU): never silent. `driver_gpus`:
// the GPUs this rank's node lists (nvidia_gpus_on_node()).
std::string cpu_on_gpu_nodes(const World& world, const BackendChoice& choice, int driver_gpus);

}  // namespace wt::distributed
