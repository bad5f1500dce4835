// The NCCL backend's entry points in a build without NCCL (WANTRAIN_NCCL_ENABLED off).
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/util/error.hpp"

namespace wt::distributed {

bool nccl_built() { return false; }
std::string nccl_unavailable_reason() { return "this wantrain was built without NCCL"; }
int cuda_device_count() { return 0; }
double cuda_device_memory_bytes(int) { return 0; }
double cuda_device_memory_in_use_bytes(int) { return 0; }

RankDevice this_rank_device(const World&) {
  RankDevice none;
  none.why_none = "this wantrain was built without NCCL";
  return none;
}

NcclUniqueIdBytes broadcast_nccl_unique_id(const World&) {
  throw UsageError("this wantrain was built without NCCL (WANTRAIN_WITH_NCCL=OFF or NCCL not found)");
}

std::unique_ptr<Comm> make_nccl_comm(const World&, const GpuPlacement&, CommOptions) {
  throw SettingError("backend",
                     "nccl: this wantrain was built without NCCL; rebuild with the CUDA toolkit and NCCL installed "
                     "(WANTRAIN_WITH_NCCL=ON) or use the MPI backend");
}

}  // namespace wt::distributed
