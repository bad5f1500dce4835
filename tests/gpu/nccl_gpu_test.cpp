// NcclComm on real GPUs, one rank per GPU (registered for 1 and 2 ranks).
// Without a GPU per rank (or without a CUDA LibTorch) every rank exits 77
// and CTest reports the test as skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/config.hpp"

namespace {

wt::distributed::World* g_world = nullptr;
constexpr int kSkipped = 77;

TEST(NcclComm, AllReduceBroadcastAllGatherOnGpus) {
  auto comm = wt::distributed::make_nccl_comm(*g_world, {});
  const int n = comm->size(), r = comm->rank();
  const auto dev = torch::TensorOptions().device(comm->device());
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    auto t = torch::full({1 << 20}, r + 1, dev.dtype(dtype));
    comm->all_reduce(t);
    EXPECT_TRUE(torch::all(t.cpu() == n * (n + 1) / 2).item<bool>());
    comm->all_reduce(t, {wt::distributed::ReduceOp::Avg});  // all equal: the average is the value
    EXPECT_TRUE(torch::all(t.cpu() == n * (n + 1) / 2).item<bool>());
  }
  auto b = torch::full({1000}, r, dev.dtype(torch::kFloat));
  comm->broadcast(b, {n - 1});
  EXPECT_TRUE(torch::all(b.cpu() == n - 1).item<bool>());
  auto gathered = torch::empty({n, 4}, dev.dtype(torch::kFloat));  // [ranks, 4]
  comm->all_gather(gathered, torch::full({4}, r, dev.dtype(torch::kFloat)));
  for (int i = 0; i < n; ++i) EXPECT_TRUE(torch::all(gathered[i].cpu() == i).item<bool>());
  comm->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  wt::distributed::World world(argc, argv);
  g_world = &world;
  // Skip on every rank alike when any rank lacks its GPU.
  const int mine = wt::distributed::nccl_usable(world) ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world.comm());
  if (!all) {
    if (world.is_root())
      std::printf(
          "SKIPPED: NCCL GPU tests need one CUDA device per rank and a CUDA LibTorch "
          "(this rank sees %d device(s), LibTorch CUDA: %s)\n",
          wt::distributed::cuda_device_count(), WANTRAIN_TORCH_HAS_CUDA ? "yes" : "no");
    world.finalize();
    return kSkipped;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, world.comm());
  world.finalize();
  return any;
}
