// NcclComm on real GPUs, one rank per GPU (registered for 1 and 2 ranks).
// Without a GPU per rank (or without a CUDA LibTorch) every rank exits 77
// and CTest reports the test as skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "wantrain/distributed/device_placement.hpp"
#include "wantrain/distributed/nccl_comm.hpp"
#include "wantrain/distributed/world.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/config.hpp"
#include "wantrain/distributed/mpi_comm.hpp"
#include "wantrain/distributed/reducer.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/shard_source.hpp"
#include "wantrain/nn/block_swap.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "../common/shards.hpp"
#include "../common/small_models.hpp"

namespace {

wt::distributed::World* g_world = nullptr;
constexpr int kSkipped = 77;

TEST(NcclComm, AllReduceBroadcastAllGatherOnGpus) {
  auto comm = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
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

// Sequence parallelism's collectives on NCCL: the all-to-all (grouped sends
// and receives) and a split into groups of one rank each.
TEST(NcclComm, AllToAllAndSplitOnGpus) {
  auto comm = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  const int n = comm->size(), r = comm->rank();
  const auto dev = torch::TensorOptions().device(comm->device()).dtype(torch::kFloat);
  auto input = torch::empty({n, 5}, dev);  // chunk j: 100 r + j
  for (int j = 0; j < n; ++j) input[j].fill_(100.0 * r + j);
  auto output = torch::empty({n, 5}, dev);
  comm->all_to_all(output, input);
  for (int i = 0; i < n; ++i) EXPECT_TRUE(torch::all(output[i].cpu() == 100.0 * i + r).item<bool>());
  auto alone = comm->split(r);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  auto t = torch::full({8}, r + 1.0, dev);
  alone->all_reduce(t);
  EXPECT_TRUE(torch::all(t.cpu() == r + 1.0).item<bool>());
  comm->barrier();
}

// A small MLP; the same weights on every rank and device from the seed.
torch::nn::Sequential toy_model(int64_t width) {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(width, 3 * width), torch::nn::GELU(),
                               torch::nn::Linear(3 * width, width));
}

at::Tensor input_of(int rank, int64_t rows, int64_t width) {
  return torch::linspace(-1.0, 1.0, rows * width).reshape({rows, width}) * (1.0 + 0.5 * rank);
}

wt::distributed::Reducer::NamedTensors named(torch::nn::Module& model) {
  wt::distributed::Reducer::NamedTensors out;
  for (const auto& item : model.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

// The Reducer on GPUs: hooks fire on CUDA gradients, buckets are CUDA views,
// and the reduced gradient is what the CPU computes for the whole batch
// (1 x 2B = 2 x B).
TEST(ReducerOnGpu, GradientsEqualTheCpuGradientOfTheWholeBatch) {
  auto comm = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  auto model = toy_model(32);
  auto reference = toy_model(32);  // stays on the CPU
  model->to(comm->device());
  wt::distributed::ReducerOptions options;
  options.first_bucket_bytes = 4096;  // several buckets
  options.bucket_bytes = 8192;
  wt::distributed::Reducer reducer(*comm, named(*model), {}, options);
  for (const auto& bucket : reducer.bucket_buffers()) EXPECT_TRUE(bucket.is_cuda());
  reducer.zero_grad();
  reducer.prepare_for_backward(true);
  model->forward(input_of(comm->rank(), 4, 32).to(comm->device())).pow(2).mean().backward();
  reducer.finalize_backward();
  for (int r = 0; r < comm->size(); ++r) reference->forward(input_of(r, 4, 32)).pow(2).mean().backward();
  const auto params = model->parameters(), expected = reference->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::allclose(params[i].grad().cpu(), expected[i].grad() / comm->size(), 1e-4, 1e-6)) << i;
}

// loss = mean((x w - y)^2) on the GPU, for the trainer steps below.
class GpuLeastSquares : public wt::train::Objective {
 public:
  explicit GpuLeastSquares(torch::Device device)
      : w_(torch::full({8}, 0.1, torch::TensorOptions().device(device)).requires_grad_()), groups_(1) {
    groups_.front().parameters.emplace_back("w", w_);
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  wt::train::ObjectiveLoss loss(const wt::train::Batch& batch, const wt::train::StepContext&) override {
    return {(torch::matmul(batch.at("x"), w_.unsqueeze(1)).squeeze(1) - batch.at("y")).square().mean()};
  }
  std::string kind() const override { return "least-squares"; }
  at::Tensor validation_losses(const wt::train::Batch& batch) override {
    return (torch::matmul(batch.at("x"), w_.unsqueeze(1)).squeeze(1) - batch.at("y")).square();
  }
  at::Tensor w() const { return w_.detach().cpu(); }

 private:
  at::Tensor w_;
  std::vector<wt::train::ParameterGroup> groups_;
};

wt::train::Batch batch_of(int rank, bool poison) {
  wt::train::Batch b;
  auto x = input_of(rank, 2, 8), y = torch::linspace(0.0, 1.0, 2);
  if (poison) y[0] = std::numeric_limits<float>::infinity();
  b.tensors["x"] = x;
  b.tensors["y"] = y;
  b.indices = {2 * rank, 2 * rank + 1};
  return b;
}

// A bf16 and an fp16 step on the GPU take the step the CPU takes in fp32,
// within the precision of the products; an overflow on one rank skips the
// step on every rank and backs the fp16 scale off.
TEST(EngineOnGpu, Bf16AndFp16StepsFollowTheCpuAndSkipTogether) {
  auto gpu = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  wt::distributed::MpiComm cpu(*g_world, {});
  wt::train::EngineOptions options;
  options.micro_batch = 2;
  options.schedule = {0.01, wt::train::Schedule::Constant, 0, 10};
  GpuLeastSquares reference_objective(torch::kCPU);
  wt::train::Engine reference(cpu, reference_objective, options);
  const auto expected = reference.step(batch_of(gpu->rank(), false));
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    options.compute_dtype = dtype;
    GpuLeastSquares objective(gpu->device());
    wt::train::Engine engine(*gpu, objective, options);
    const auto got = engine.step(batch_of(gpu->rank(), false));
    EXPECT_FALSE(got.skipped);
    EXPECT_NEAR(got.loss, expected.loss, 2e-2 * std::abs(expected.loss)) << c10::toString(dtype);
    EXPECT_TRUE(torch::allclose(objective.w(), reference_objective.w(), 1e-2, 1e-3)) << c10::toString(dtype);
    if (dtype == at::kHalf) {
      const double scale = got.loss_scale;
      const auto overflow = engine.step(batch_of(gpu->rank(), /*poison=*/gpu->rank() == 0));
      EXPECT_TRUE(overflow.skipped);  // on every rank, rank 0's infinity or not
      EXPECT_LT(overflow.loss_scale, scale);
    }
  }
}

// The checkpoint snapshot copies GPU state to the CPU, as it was at the call.
TEST(EngineOnGpu, SnapshotHoldsTheGpuStateOnTheCpu) {
  auto gpu = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  wt::train::EngineOptions options;
  options.micro_batch = 2;
  options.ema_decay = 0.9;
  options.schedule = {0.01, wt::train::Schedule::Constant, 0, 10};
  GpuLeastSquares objective(gpu->device());
  wt::train::Engine engine(*gpu, objective, options);
  engine.step(batch_of(gpu->rank(), false));
  wt::ckpt::Checkpoint snapshot;
  engine.save_state(snapshot);
  ASSERT_EQ(snapshot.model.size(), 1u);
  EXPECT_TRUE(snapshot.model[0].second.is_cpu());
  EXPECT_TRUE(torch::equal(snapshot.model[0].second, objective.w()));
  ASSERT_EQ(snapshot.optim.size(), 1u);
  EXPECT_TRUE(snapshot.optim[0].exp_avg.is_cpu());
  EXPECT_EQ(snapshot.optim[0].step, 1);
  EXPECT_TRUE(snapshot.model[0].second.is_pinned()) << "queued copies need page-locked memory";
  engine.step(batch_of(gpu->rank(), false));  // the snapshot does not follow
  EXPECT_FALSE(torch::equal(snapshot.model[0].second, objective.w()));
  // The next snapshot reuses the pinned buffers and holds the new state.
  const void* buffer = snapshot.model[0].second.data_ptr();
  engine.save_state(snapshot);
  EXPECT_EQ(snapshot.model[0].second.data_ptr(), buffer);
  EXPECT_TRUE(torch::equal(snapshot.model[0].second, objective.w()));
}

// A small WanModel's squared error against a target, on `device`.
class GpuWanRegression : public wt::train::Objective {
 public:
  explicit GpuWanRegression(torch::Device device)
      : model_(wt::testing::seeded_small_model(wt::testing::small_wan_config(4))), groups_(1) {
    model_->to(device);
    for (const auto& item : model_->named_parameters())
      groups_.front().parameters.emplace_back(item.key(), item.value());
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  wt::train::ObjectiveLoss loss(const wt::train::Batch& b, const wt::train::StepContext&) override {
    return {(model_->forward(b.at("x"), b.at("t"), b.at("context")) - b.at("y")).square().mean()};
  }
  std::string kind() const override { return "wan-regression"; }
  at::Tensor validation_losses(const wt::train::Batch&) override { return {}; }
  wt::wan::WanModel& model() { return model_; }

 private:
  wt::wan::WanModel model_;
  std::vector<wt::train::ParameterGroup> groups_;
};

wt::train::Batch wan_batch_of(int rank, int step) {
  torch::manual_seed(1000 * step + rank);
  const auto config = wt::testing::small_wan_config(4);
  wt::train::Batch b;
  b.tensors["x"] = torch::randn({2, config.in_dim, 2, 4, 4});
  b.tensors["t"] = torch::rand({2}) * 1000;
  b.tensors["context"] = torch::randn({2, 5, config.text_dim});
  b.tensors["y"] = torch::randn({2, config.out_dim, 2, 4, 4});
  b.indices = {2 * rank, 2 * rank + 1};
  return b;
}

// ZeRO-3 on GPUs: units given memory by the caching allocator, gathered by
// NCCL (the next one's in flight), released after their gradients; the
// steps follow the CPU's replicated Engine, and the checkpoint snapshot
// holds the whole weights on rank 0.
TEST(EngineOnGpu, ZeroThreeFollowsTheCpuAndSnapshotsWholeWeights) {
  auto gpu = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  wt::distributed::MpiComm cpu(*g_world, {});
  wt::train::EngineOptions options;
  options.micro_batch = 2;
  options.schedule = {0.01, wt::train::Schedule::Constant, 0, 10};
  options.ema_decay = 0.9;
  options.zero = 3;
  for (const int64_t checkpoint : {0, 1}) {
    SCOPED_TRACE(checkpoint ? "checkpointed blocks" : "plain blocks");
    GpuWanRegression objective(gpu->device());
    objective.model()->set_grad_checkpoint(checkpoint);
    wt::train::Engine engine(*gpu, objective, options);
    objective.model()->set_parameter_units(engine.parameter_units());
    GpuWanRegression fresh_reference(torch::kCPU);
    wt::train::Engine replicated(cpu, fresh_reference, [&] {
      auto o = options;
      o.zero = 0;
      return o;
    }());
    for (int step = 0; step < 2; ++step) {
      const auto want = replicated.step(wan_batch_of(gpu->rank(), step));
      const auto got = engine.step(wan_batch_of(gpu->rank(), step));
      EXPECT_NEAR(got.loss, want.loss, 1e-4 * std::abs(want.loss)) << "step " << step;
    }
    const auto weights = engine.weights();
    for (size_t i = 0; i < weights.size(); ++i)
      EXPECT_TRUE(torch::allclose(weights[i].second, fresh_reference.trainable()[i].second, 1e-3, 1e-4))
          << weights[i].first;
    wt::ckpt::Checkpoint snapshot;
    engine.save_state(snapshot);
    ASSERT_EQ(snapshot.model.size(), gpu->rank() == 0 ? weights.size() : 0u);
    for (size_t i = 0; i < snapshot.model.size(); ++i)
      EXPECT_TRUE(torch::equal(snapshot.model[i].second, weights[i].second)) << weights[i].first;
  }
}

// Batches for a GPU come in pinned buffers and are copied with
// non_blocking; the Loader refills a buffer only after its batch's copies
// are done (CopyFence). Each batch is dropped right after its copy is
// queued, while the loader reads ahead into recycled buffers: what reaches
// the device must still be the batch's own samples.
TEST(LoaderOnGpu, PinnedBatchesReachTheDeviceIntactWhileBuffersAreRecycled) {
  const auto placement = wt::distributed::place_gpus(*g_world);
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(placement.ranks[size_t(g_world->rank())].ordinal));
  const auto shape = wt::testing::small_shape(wt::data::Stored::Float32, wt::data::Stored::Float32);
  const auto dir = wt::testing::fresh_directory("gpu-loader-" + std::to_string(g_world->rank()));
  wt::testing::write_shard(dir + "/a.h5", shape, 8, 5);
  wt::train::ShardBatchesOptions options;
  options.prefetch = 2;
  options.for_gpu = true;
  wt::train::ShardBatches source(
      wt::data::Dataset::open(dir),
      wt::data::DistributedSampler(wt::data::DataLayout(std::vector<int64_t>{8}), {1, 0, 2, 3, true, false}), options);
  std::vector<std::pair<std::vector<int64_t>, at::Tensor>> arrived;
  for (int n = 0; n < 16; ++n) {
    int64_t epoch = 0;
    wt::train::Batch batch = source.next(epoch);
    EXPECT_TRUE(batch.at("latents").is_pinned());
    const auto on_device = batch.slice(0, batch.size(), device);
    arrived.emplace_back(batch.indices, on_device.at("latents"));
  }  // each host batch is dropped here, its copy perhaps still queued
  for (const auto& [indices, latents] : arrived)
    for (size_t j = 0; j < indices.size(); ++j)
      EXPECT_TRUE(torch::equal(latents[int64_t(j)].cpu(), wt::testing::expected_latents(shape, 5, indices[j])))
          << "sample " << indices[j];
}

// Block swap on a GPU (--blocks-to-swap): a LoRA model whose blocks' frozen
// weights (fp8 with their scales, or bf16) wait in page-locked host memory
// and come to the GPU on a side stream, fenced by events, computes what the
// model holding them on the GPU computes: the same output and adapter
// gradients, under checkpointing or not (and then with its blocks' inputs
// offloaded, --activation-offload); and after a no-grad forward no swapped
// block is left on the GPU.
TEST(BlockSwapOnGpu, ASwappedLoraModelComputesAsTheResidentOne) {
  auto gpu = wt::distributed::make_nccl_comm(*g_world, wt::distributed::place_gpus(*g_world), {});
  const auto device = gpu->device();
  const auto config = wt::testing::small_wan_config(4);
  wt::wan::LoraOptions lora;
  lora.rank = 4;
  for (const auto dtype : {at::kFloat8_e4m3fn, at::kBFloat16})
    for (const int64_t checkpoint : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", checkpointing every " << checkpoint);
      auto resident = wt::testing::seeded_small_model(config, lora, dtype);
      auto swapped = wt::testing::seeded_small_model(config, lora, dtype);
      wt::nn::BlockSwap swap(*swapped, 3, device);  // before the model goes to the GPU
      swapped->set_parameter_units(&swap);
      for (auto* model : {&resident, &swapped}) {
        (*model)->to(device);
        (*model)->set_grad_checkpoint(checkpoint);
      }
      swapped->set_activation_offload(checkpoint > 0);  // the checkpointed inputs in host memory too
      torch::manual_seed(3);
      const auto options = torch::TensorOptions().device(device);
      const auto x = torch::randn({2, config.in_dim, 2, 8, 8}, options);
      const auto t = torch::full({2}, 500.0, options);
      const auto context = torch::randn({2, 4, config.text_dim}, options);
      const auto y = resident->forward(x, t, context), y_swapped = swapped->forward(x, t, context);
      EXPECT_TRUE(torch::equal(y, y_swapped));
      y.square().mean().backward();
      y_swapped.square().mean().backward();
      auto grads = swapped->named_parameters();
      for (const auto& item : resident->named_parameters()) {
        if (item.value().requires_grad()) {
          EXPECT_TRUE(torch::equal(item.value().grad(), grads[item.key()].grad())) << item.key();
        }
      }
      torch::NoGradGuard no_grad;
      swapped->forward(x, t, context);
      EXPECT_EQ(swapped->blocks[0]->as<wt::wan::WanBlockImpl>()->modulation.numel(), 0);
      EXPECT_GT(swap.host_bytes(), 0.0);
    }
}

}  // namespace

int main(int argc, char** argv) {
  wt::distributed::World world(argc, argv);
  g_world = &world;
  // Skip on every rank alike when any rank lacks its GPU.
  const auto placement = wt::distributed::place_gpus(world);
  if (!placement.usable()) {
    if (world.is_root())
      std::printf("SKIPPED: NCCL GPU tests need one CUDA device per rank and a CUDA LibTorch: %s\n",
                  placement.problem.c_str());
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
