#include "wantrain/distributed/device_placement.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/config.hpp"

namespace wt::distributed {
namespace {

// "ranks 0, 1, 2" or "rank 3"; more than four are counted.
std::string rank_list(const std::vector<int>& ranks) {
  std::vector<int> shown(ranks.begin(), ranks.begin() + std::min<size_t>(ranks.size(), 4));
  std::string out = fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(shown, ", "));
  if (ranks.size() > shown.size()) out += fmt::format(" and {} more", ranks.size() - shown.size());
  return out;
}

// One rank's device as one line of fields (hosts, bus ids and reasons hold no newline).
std::string pack(const RankDevice& d) { return fmt::format("{}\n{}\n{}\n{}", d.host, d.ordinal, d.bus_id, d.why_none); }

RankDevice unpack(int rank, const std::string& text) {
  std::istringstream in(text);
  RankDevice d;
  d.rank = rank;
  std::string ordinal;
  std::getline(in, d.host);
  std::getline(in, ordinal);
  std::getline(in, d.bus_id);
  std::getline(in, d.why_none);
  d.ordinal = std::stoi(ordinal);
  return d;
}

}  // namespace

std::string RankDevice::describe() const {
  if (ordinal < 0) return "cpu";
  return bus_id.empty() ? fmt::format("cuda:{}", ordinal) : fmt::format("cuda:{} (PCI {})", ordinal, bus_id);
}

bool GpuPlacement::any_gpu() const {
  for (const auto& d : ranks)
    if (d.ordinal >= 0) return true;
  return false;
}

std::string placement_problem(const std::vector<RankDevice>& ranks) {
  // Ranks without a GPU, grouped by reason.
  std::map<std::string, std::vector<int>> without;
  for (const auto& d : ranks)
    if (d.ordinal < 0) without[d.why_none.empty() ? std::string("no GPU") : d.why_none].push_back(d.rank);
  if (!without.empty()) {
    const auto& [why, which] = *without.begin();
    return fmt::format("{} on {}: {}", rank_list(which), ranks[size_t(which.front())].host, why);
  }
  // Ranks of one host on one device.
  std::map<std::pair<std::string, std::string>, std::vector<int>> users;
  for (const auto& d : ranks)
    users[{d.host, d.bus_id.empty() ? std::to_string(d.ordinal) : d.bus_id}].push_back(d.rank);
  for (const auto& [device, which] : users) {
    if (which.size() < 2) continue;
    const auto& first = ranks[size_t(which.front())];
    return fmt::format(
        "{} on {} would share one GPU, {}; NCCL needs a GPU per rank: launch at most one rank per GPU "
        "and let each rank see its own (srun --gpus-per-task=1, or do not export one "
        "CUDA_VISIBLE_DEVICES to every rank)",
        rank_list(which), first.host, first.describe());
  }
  return "";
}

GpuPlacement place_gpus(const World& world) {
  RankDevice mine = this_rank_device(world);
  mine.rank = world.rank();
  mine.host = world.host();
  GpuPlacement placement;
  const auto all = world.all_gather(pack(mine), "all_gather (the ranks' GPUs)");
  for (int r = 0; r < int(all.size()); ++r) placement.ranks.push_back(unpack(r, all[size_t(r)]));
  placement.problem = placement_problem(placement.ranks);
  return placement;
}

int nvidia_gpus_on_node(const std::string& driver_dir) {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it(driver_dir, error), end; !error && it != end; it.increment(error))
    if (it->is_directory(error)) ++count;
  return count;
}

ChosenDevice choose_device(const DeviceRequest& request, const std::string& setting) {
  const int visible = WANTRAIN_TORCH_HAS_CUDA ? int(torch::cuda::device_count()) : 0;
  ChosenDevice chosen;
  switch (request.kind) {
    case DeviceRequest::Kind::Cpu: return chosen;
    case DeviceRequest::Kind::Cuda:
      if (!WANTRAIN_TORCH_HAS_CUDA)
        throw SettingError(setting,
                           fmt::format("cuda:{}: this wantrain's LibTorch has no CUDA support", request.index));
      if (request.index < 0 || request.index >= visible)
        throw SettingError(setting, fmt::format("cuda:{}: {} CUDA device{} visible", request.index, visible,
                                                visible == 1 ? " is" : "s are"));
      chosen.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(request.index));
      return chosen;
    case DeviceRequest::Kind::Auto: break;
  }
  if (visible > 0) {
    chosen.device = c10::Device(c10::kCUDA, 0);
  } else if (const int gpus = nvidia_gpus_on_node(); gpus > 0) {
    chosen.warning =
        fmt::format("computing on the CPU although this node has {} NVIDIA GPU{}: {}", gpus, gpus == 1 ? "" : "s",
                    WANTRAIN_TORCH_HAS_CUDA ? "CUDA sees none (CUDA_VISIBLE_DEVICES, the driver?)"
                                            : "this wantrain's LibTorch has no CUDA support");
  }
  return chosen;
}

}  // namespace wt::distributed
