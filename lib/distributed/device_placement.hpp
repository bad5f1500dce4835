// Which GPU each rank takes, and whether NCCL can use them: every rank needs
// a GPU of its own. Two ranks on one GPU (mpirun -np 2 on a 1-GPU box, or
// CUDA_VISIBLE_DEVICES=0 exported to every rank) would make
// ncclCommInitRank fail, so the ranks compare the PCI bus ids of their
// choices before any NCCL call.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace wt::distributed {

class World;

struct RankDevice {
  int rank = 0;
  std::string host;
  int ordinal = -1;      // the CUDA device index among those this rank sees; -1: no GPU for it
  std::string bus_id;    // its PCI bus id (e.g. 0000:3b:00.0), what tells two ranks' devices apart
  std::string why_none;  // with ordinal -1: why (no CUDA in this build or LibTorch, none visible)

  // "cuda:1 (PCI 0000:3b:00.0)", or "cpu".
  std::string describe() const;
};

struct GpuPlacement {
  std::vector<RankDevice> ranks;  // indexed by rank
  std::string problem;            // "" when every rank has a GPU of its own

  bool usable() const { return problem.empty(); }
  // Whether any rank sees a GPU: a fallback to the CPU is then news.
  bool any_gpu() const;
};

// What stops NCCL from serving these ranks, in one line naming the ranks and
// the device, or "": a rank without a GPU, or ranks of one host on one GPU.
std::string placement_problem(const std::vector<RankDevice>& ranks);

// Collective: every rank's device (this_rank_device, nccl_comm.hpp) on
// every rank, and the problem with them.
GpuPlacement place_gpus(const World& world);

// The number of GPUs the NVIDIA driver lists on this node (one directory per
// GPU under `driver_dir`), whatever this build, LibTorch or
// CUDA_VISIBLE_DEVICES can use: what tells a GPU node from a CPU one when
// CUDA itself is not available to say so.
int nvidia_gpus_on_node(const std::string& driver_dir = "/proc/driver/nvidia/gpus");

// A serial tool's device (wansample --device).
struct DeviceRequest {
  enum class Kind { Auto, Cpu, Cuda } kind = Kind::Auto;
  int index = 0;  // with Cuda
};

struct ChosenDevice {
  c10::Device device = c10::Device(c10::kCPU);
  std::string warning;  // auto on the CPU of a node with NVIDIA GPUs: say so, once
};

// auto: cuda:0 when LibTorch sees a CUDA device, else the CPU; cuda:N: that
// device, or a UsageError naming `setting` (no CUDA in this LibTorch, or
// fewer devices visible).
ChosenDevice choose_device(const DeviceRequest& request, const std::string& setting);

}  // namespace wt::distributed
