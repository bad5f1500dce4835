// Whether NCCL can serve a set of ranks: each rank needs a GPU of its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "wantrain/distributed/device_placement.hpp"

namespace {

using wt::distributed::placement_problem;
using wt::distributed::RankDevice;

RankDevice gpu(int rank, const std::string& host, int ordinal, const std::string& bus_id) {
  RankDevice d;
  d.rank = rank;
  d.host = host;
  d.ordinal = ordinal;
  d.bus_id = bus_id;
  return d;
}

RankDevice none(int rank, const std::string& host, const std::string& why) {
  RankDevice d;
  d.rank = rank;
  d.host = host;
  d.why_none = why;
  return d;
}

TEST(Placement, OneGpuPerRankIsUsableAcrossHostsWithTheSameBusIds) {
  // Two nodes with identical boards: the same bus ids on different hosts are different GPUs.
  EXPECT_EQ(placement_problem({gpu(0, "a", 0, "0000:3b:00.0"), gpu(1, "a", 1, "0000:5e:00.0"),
                               gpu(2, "b", 0, "0000:3b:00.0"), gpu(3, "b", 1, "0000:5e:00.0")}),
            "");
  // srun --gpus-per-task=1: every rank sees its own GPU as device 0.
  EXPECT_EQ(placement_problem({gpu(0, "a", 0, "0000:3b:00.0"), gpu(1, "a", 0, "0000:5e:00.0")}), "");
}

TEST(Placement, TwoRanksOnOneGpuAreNamedWithTheDevice) {
  // mpirun -np 2 on a 1-GPU box, or CUDA_VISIBLE_DEVICES=0 exported to both ranks.
  const auto problem = placement_problem({gpu(0, "node7", 0, "0000:3b:00.0"), gpu(1, "node7", 0, "0000:3b:00.0")});
  EXPECT_EQ(problem.rfind("ranks 0, 1 on node7 would share one GPU, cuda:0 (PCI 0000:3b:00.0); ", 0), 0u) << problem;
  EXPECT_NE(problem.find("--gpus-per-task=1"), std::string::npos) << problem;
  // Without bus ids the ordinals stand in for them.
  EXPECT_NE(
      placement_problem({gpu(0, "h", 0, ""), gpu(1, "h", 0, "")}).find("ranks 0, 1 on h would share one GPU, cuda:0;"),
      std::string::npos);
  // Many sharing ranks are counted after the first four.
  std::vector<RankDevice> six;
  for (int r = 0; r < 6; ++r) six.push_back(gpu(r, "h", 0, "0000:01:00.0"));
  EXPECT_NE(placement_problem(six).find("ranks 0, 1, 2, 3 and 2 more on h"), std::string::npos);
}

TEST(Placement, ARankWithoutAGpuComesFirstWithItsReason) {
  EXPECT_EQ(placement_problem({gpu(0, "a", 0, "0000:3b:00.0"), none(1, "b", "no CUDA device is visible")}),
            "rank 1 on b: no CUDA device is visible");
  EXPECT_EQ(placement_problem({none(0, "a", "no CUDA device is visible"), none(1, "a", "no CUDA device is visible")}),
            "ranks 0, 1 on a: no CUDA device is visible");
}

TEST(Placement, DescribesTheDeviceARankUses) {
  EXPECT_EQ(gpu(0, "a", 1, "0000:5e:00.0").describe(), "cuda:1 (PCI 0000:5e:00.0)");
  EXPECT_EQ(gpu(0, "a", 1, "").describe(), "cuda:1");
  EXPECT_EQ(none(0, "a", "x").describe(), "cpu");
}

TEST(Placement, CountsTheGpusTheDriverLists) {
  const auto dir = std::filesystem::temp_directory_path() / "wantrain-nvidia-gpus-test";
  std::filesystem::remove_all(dir);
  EXPECT_EQ(wt::distributed::nvidia_gpus_on_node(dir.string()), 0);  // no driver: no directory
  std::filesystem::create_directories(dir / "0000:3b:00.0");
  std::filesystem::create_directories(dir / "0000:5e:00.0");
  std::ofstream(dir / "not-a-gpu") << "x";
  EXPECT_EQ(wt::distributed::nvidia_gpus_on_node(dir.string()), 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
