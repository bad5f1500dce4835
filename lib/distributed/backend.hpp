// Choosing and making the Comm: --backend auto|mpi|nccl.
#pragma once

#include <memory>
#include <string>

#include "wantrain/distributed/comm.hpp"

namespace wt::distributed {

class World;

enum class Backend { Auto, Mpi, Nccl };

// Throws UsageError naming --backend for anything but auto|mpi|nccl.
Backend parse_backend(const std::string& name);
const char* to_string(Backend backend);

// Collective: auto becomes nccl when NCCL can serve every rank (built, CUDA
// LibTorch, a GPU visible), else mpi. The same answer on every rank.
Backend resolve_backend(const World& world, Backend requested);

// Collective: the Comm for `backend` (resolved first if auto) over the World.
std::unique_ptr<Comm> make_comm(const World& world, Backend backend, CommOptions options = {});

}  // namespace wt::distributed
