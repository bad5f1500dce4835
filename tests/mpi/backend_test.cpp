// Backend choice, and the ncclUniqueId handed from rank 0 to every rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "wantrain/distributed/backend.hpp"
#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/util/error.hpp"

TEST(Backend, AutoIsTheSameOnEveryRankAndMpiWithoutAUsableGpu) {
  const auto& world = test_world();
  const auto resolved = wt::distributed::resolve_backend(world, wt::distributed::Backend::Auto);
  auto mine = torch::full({1}, static_cast<int>(resolved), torch::kInt);
  auto all = torch::empty({world.size()}, torch::kInt);
  test_comm().all_gather(all, mine);
  EXPECT_TRUE(torch::all(all == all[0]).item<bool>());
  if (!wt::distributed::place_gpus(world).usable()) {
    EXPECT_EQ(resolved, wt::distributed::Backend::Mpi);
  }

  if (resolved == wt::distributed::Backend::Mpi) {
    auto comm = wt::distributed::make_comm(world, wt::distributed::Backend::Auto);
    EXPECT_STREQ(comm->backend(), "MPI");
    auto t = torch::ones({3});
    comm->all_reduce(t);
    EXPECT_TRUE(torch::all(t == world.size()).item<bool>());
  }
}

TEST(Nccl, UniqueIdFromRankZeroArrivesByteIdenticalOnEveryRank) {
  if (!wt::distributed::nccl_built()) GTEST_SKIP() << "this build has no NCCL (WANTRAIN_WITH_NCCL off)";
  // NCCL is called through what LibTorch's CUDA backend loaded: without a
  // driver, only where WANTRAIN_CUDA=on asks for it (mpi.suite's environment).
  const std::string unavailable = wt::distributed::nccl_unavailable_reason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const auto& world = test_world();
  // ncclGetUniqueId needs no GPU: it only opens the bootstrap socket.
  const wt::distributed::NcclUniqueIdBytes id = wt::distributed::broadcast_nccl_unique_id(world);
  auto mine = torch::empty({static_cast<int64_t>(id.size())}, torch::kByte);
  std::memcpy(mine.data_ptr(), id.data(), id.size());
  auto all = torch::empty({world.size(), static_cast<int64_t>(id.size())}, torch::kByte);  // [ranks, 128]
  test_comm().all_gather(all, mine);
  for (int r = 1; r < world.size(); ++r) EXPECT_TRUE(torch::equal(all[r], all[0])) << "rank " << r;
  EXPECT_TRUE(torch::any(all[0] != 0).item<bool>()) << "rank 0 sent an all-zero id";

  // A second id is a fresh one, not a replay of the first.
  const wt::distributed::NcclUniqueIdBytes again = wt::distributed::broadcast_nccl_unique_id(world);
  EXPECT_NE(std::memcmp(again.data(), id.data(), id.size()), 0);
}

TEST(Nccl, ExplicitNcclWithoutAUsableGpuIsAUsageErrorOnEveryRank) {
  const auto& world = test_world();
  if (wt::distributed::place_gpus(world).usable()) GTEST_SKIP() << "a GPU is usable here";
  try {
    wt::distributed::make_comm(world, wt::distributed::Backend::Nccl);
    FAIL() << "make_comm(nccl) succeeded without a usable GPU";
  } catch (const wt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("backend: nccl: "), std::string::npos) << e.what();
  } catch (const wt::distributed::CollectiveExit& exit) {
    EXPECT_EQ(exit.code, 2);  // the agreed exit: the lowest failing rank printed the reason
  }
}

TEST(Placement, EveryRankHoldsEveryRanksDeviceAndTheSameVerdict) {
  const auto& world = test_world();
  const auto placement = wt::distributed::place_gpus(world);
  ASSERT_EQ(placement.ranks.size(), size_t(world.size()));
  const auto peers = world.peers();
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(placement.ranks[size_t(r)].rank, r);
    EXPECT_EQ(placement.ranks[size_t(r)].host, peers[size_t(r)].host);
  }
  // The verdict is a function of what was gathered: the same on every rank.
  const auto verdicts = world.all_gather(placement.problem, "test");
  for (const auto& v : verdicts) EXPECT_EQ(v, verdicts[0]);
  if (!placement.any_gpu()) {
    // A CPU node: the reason is named, and auto takes MPI without a warning.
    EXPECT_FALSE(placement.usable());
    EXPECT_NE(placement.problem.find("rank"), std::string::npos) << placement.problem;
    const auto choice = wt::distributed::choose_backend(world, wt::distributed::Backend::Auto);
    EXPECT_EQ(choice.backend, wt::distributed::Backend::Mpi);
    EXPECT_EQ(choice.fallback, "");
  }
}

TEST(World, AllGatherOfStringsOfDifferentLengthsAndEmptyOnes) {
  const auto& world = test_world();
  const std::string mine =
      world.rank() == 0 ? std::string() : std::string(size_t(world.rank()) * 1000, char('a' + world.rank()));
  const auto all = world.all_gather(mine, "test");
  ASSERT_EQ(all.size(), size_t(world.size()));
  for (int r = 0; r < world.size(); ++r)
    EXPECT_EQ(all[size_t(r)], r == 0 ? std::string() : std::string(size_t(r) * 1000, char('a' + r)));
}

// A CPU run on a node whose driver lists GPUs is named, the same line on
// every rank, with the cause; on nodes without any it is silent.
TEST(Placement, ComputingOnTheCpuOfAGpuNodeIsNamedWithItsCause) {
  const auto& world = test_world();
  const int last = world.size() - 1;
  const auto mpi = wt::distributed::choose_backend(world, wt::distributed::Backend::Mpi);
  EXPECT_EQ(wt::distributed::cpu_on_gpu_nodes(world, mpi, 0), "");
  const std::string asked = wt::distributed::cpu_on_gpu_nodes(world, mpi, world.rank() == last ? 4 : 0);
  EXPECT_EQ(asked, "computing on the CPU although a node of this job has 4 NVIDIA GPUs: the backend setting is mpi");
  const auto automatic = wt::distributed::choose_backend(world, wt::distributed::Backend::Auto);
  if (automatic.backend == wt::distributed::Backend::Nccl) GTEST_SKIP() << "NCCL serves these ranks";
  const std::string fell = wt::distributed::cpu_on_gpu_nodes(world, automatic, world.rank() == last ? 1 : 0);
  EXPECT_EQ(fell.rfind("computing on the CPU although a node of this job has 1 NVIDIA GPU: ", 0), 0u) << fell;
  // The cause: no NCCL in this build, or why NCCL cannot serve the ranks.
  EXPECT_NE(fell.find(wt::distributed::nccl_built() ? "NCCL cannot serve every rank: " + automatic.placement.problem
                                                    : std::string("built without NCCL")),
            std::string::npos)
      << fell;
}
