#include "wantrain/distributed/backend.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/util/reporter.hpp"

namespace wt::distributed {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "auto";
    case Backend::Mpi: return "mpi";
    case Backend::Nccl: return "nccl";
  }
  return "unknown";
}

BackendChoice choose_backend(const World& world, Backend requested) {
  BackendChoice choice;
  choice.requested = requested;
  if (requested == Backend::Mpi) return choice;
  choice.placement = place_gpus(world);
  if (requested == Backend::Nccl || choice.placement.usable()) {
    choice.backend = Backend::Nccl;
  } else if (choice.placement.any_gpu()) {
    choice.fallback = fmt::format("{} auto: NCCL cannot serve every rank ({}); using MPI on the CPU instead",
                                  setting_reference("backend"), choice.placement.problem);
  }
  return choice;
}

Backend resolve_backend(const World& world, Backend requested) { return choose_backend(world, requested).backend; }

std::unique_ptr<Comm> make_comm(const World& world, Backend backend, CommOptions options) {
  const BackendChoice choice = choose_backend(world, backend);
  if (!choice.fallback.empty() && world.is_root()) report_warning("{}", choice.fallback);
  return make_comm(world, choice, options);
}

std::unique_ptr<Comm> make_comm(const World& world, const BackendChoice& choice, CommOptions options) {
  if (choice.backend == Backend::Nccl) return make_nccl_comm(world, choice.placement, options);
  return std::make_unique<MpiComm>(world, options);
}

std::string cpu_on_gpu_nodes(const World& world, const BackendChoice& choice, int driver_gpus) {
  if (choice.backend == Backend::Nccl) return "";
  // The driver's list counts GPUs that this build cannot see through CUDA
  // (asking a CUDA runtime without a driver would only print its complaint).
  const bool sees_one = !choice.placement.ranks.empty() && choice.placement.ranks[size_t(world.rank())].ordinal >= 0;
  const int64_t mine = std::max<int64_t>(driver_gpus, sees_one ? 1 : 0);
  const int64_t most = world.max_over_ranks({mine}, "agreement (GPUs on the nodes)", world.timeout())[0];
  if (most == 0) return "";
  std::string why;
  if (choice.requested == Backend::Mpi)
    why = fmt::format("{} is mpi", setting_reference("backend"));
  else if (!nccl_built())
    why = "this wantrain was built without NCCL (configure with the CUDA toolkit and WANTRAIN_WITH_NCCL=ON)";
  else
    why = "NCCL cannot serve every rank: " + choice.placement.problem;
  return fmt::format("computing on the CPU although a node of this job has {} NVIDIA GPU{}: {}", most,
                     most == 1 ? "" : "s", why);
}

}  // namespace wt::distributed
