#include "wantrain/distributed/backend.hpp"

#include <fmt/format.h>

#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/distributed/mpi_check.hpp"

namespace wt::distributed {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "mpi") return Backend::Mpi;
  if (name == "nccl") return Backend::Nccl;
  throw SettingError("backend", fmt::format("'{}' is not one of auto|mpi|nccl", name));
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "auto";
    case Backend::Mpi: return "mpi";
    case Backend::Nccl: return "nccl";
  }
  return "unknown";
}

Backend resolve_backend(const World& world, Backend requested) {
  if (requested != Backend::Auto) return requested;
  const int mine = nccl_usable(world) ? 1 : 0;
  int everyone = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, world.comm()));
  return everyone ? Backend::Nccl : Backend::Mpi;
}

std::unique_ptr<Comm> make_comm(const World& world, Backend backend, CommOptions options) {
  switch (resolve_backend(world, backend)) {
    case Backend::Nccl: return make_nccl_comm(world, options);
    case Backend::Mpi:
    case Backend::Auto: break;
  }
  return std::make_unique<MpiComm>(world, options);
}

}  // namespace wt::distributed
