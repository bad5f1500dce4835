// ZeRO-3 on a WanModel over the test's ranks: the model gathers each unit
// (a block, or the root's embeddings and head) around its use, and the
// Engine takes the same steps as without sharding, holding 1/W of the
// weights between steps and a few units while it computes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <vector>

#include "../common/small_models.hpp"
#include "wantrain/ckpt/checkpoint.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/nn/parameter_units.hpp"
#include "wantrain/train/engine.hpp"
#include "wantrain/train/zero_shards.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace {

using wt::train::Batch;
using wt::train::Engine;
using wt::train::EngineOptions;
using wt::train::NamedTensors;
using wt::train::ObjectiveLoss;
using wt::train::StepContext;

constexpr int64_t kPerRank = 2;

// The squared error of a small Wan model's prediction against a target.
// A VACE model's is given the batch's "vace" context; its VACE projections
// are drawn (released zero, they would pass the branch no gradient).
class WanRegression : public wt::train::Objective {
 public:
  explicit WanRegression(int64_t checkpoint_every, const wt::wan::WanConfig& config = wt::testing::small_wan_config(4))
      : model_(wt::testing::seeded_small_model(config)), groups_(1) {
    model_->set_grad_checkpoint(checkpoint_every);
    for (const auto& item : model_->named_parameters())
      groups_.front().parameters.emplace_back(item.key(), item.value());
    if (!config.vace()) return;
    groups_.front().unit_of = [config](const std::string& name) { return wt::wan::zero_unit(config, name); };
    torch::NoGradGuard no_grad;
    torch::manual_seed(8);
    for (const auto& item : model_->named_parameters())
      if (item.key().find("_proj.weight") != std::string::npos) item.value().normal_(0, 0.1);
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  ObjectiveLoss loss(const Batch& b, const StepContext&) override {
    wt::wan::ModelCondition condition;
    if (b.tensors.count("vace")) condition.vace_context = b.at("vace");
    return {(model_->forward(b.at("x"), b.at("t"), b.at("context"), condition) - b.at("y")).square().mean()};
  }
  std::string kind() const override { return "wan-regression"; }
  at::Tensor validation_losses(const Batch&) override { return {}; }
  wt::wan::WanModel& model() { return model_; }

 private:
  wt::wan::WanModel model_;
  std::vector<wt::train::ParameterGroup> groups_;
};

Batch wan_batch(int rank, int step, int64_t samples, int64_t vace_channels = 0) {
  torch::manual_seed(1000 * step + rank);
  const auto config = wt::testing::small_wan_config(4);
  Batch b;
  b.tensors.emplace("x", torch::randn({samples, config.in_dim, 2, 4, 4}));
  b.tensors.emplace("t", torch::rand({samples}) * 1000);
  b.tensors.emplace("context", torch::randn({samples, 5, config.text_dim}));
  b.tensors.emplace("y", torch::randn({samples, config.out_dim, 2, 4, 4}));
  if (vace_channels > 0) b.tensors.emplace("vace", torch::randn({samples, vace_channels, 2, 4, 4}));
  for (int64_t j = 0; j < samples; ++j) b.indices.push_back(rank * samples + j);
  return b;
}

int64_t numel_of(const NamedTensors& named, const std::string& unit) {
  int64_t n = 0;
  for (const auto& [name, t] : named)
    if (wt::nn::parameter_unit(name) == unit) n += t.numel();
  return n;
}

}  // namespace

// 4 steps of 2 micro-steps each, clipped, with an EMA: the losses, gradient
// norms, weights and EMA of --zero 0, with blocks run plainly and
// checkpointed (recomputed inside the unit gathered for backward).
TEST(ZeroThree, AModelGatheredUnitByUnitTakesTheReplicatedSteps) {
  auto& comm = test_comm();
  for (const int64_t checkpoint : {0, 1}) {
    SCOPED_TRACE(checkpoint ? "checkpointed blocks" : "plain blocks");
    EngineOptions o;
    o.micro_batch = kPerRank / 2;
    o.accumulation = 2;
    o.schedule = {1e-2, wt::train::Schedule::Constant, 0, 10};
    o.clip = 0.5;
    o.ema_decay = 0.8;
    WanRegression replicated_objective(checkpoint), sharded_objective(checkpoint);
    Engine replicated(comm, replicated_objective, o);
    o.zero = 3;
    Engine sharded(comm, sharded_objective, o);
    ASSERT_NE(sharded.parameter_units(), nullptr);
    sharded_objective.model()->set_parameter_units(sharded.parameter_units());
    const auto& named = sharded_objective.trainable();
    int64_t numel = 0;
    for (const auto& [name, t] : named) numel += t.numel();
    // Units: the root (2 buckets: the head, then the embeddings) and 4 blocks.
    const int64_t buckets = 6, block = numel_of(named, "blocks.0"),
                  root = numel_of(named, "") + numel_of(named, "head");
    ASSERT_EQ(root + 4 * block, numel);
    // Between steps each rank holds its fp32 slices alone.
    const int64_t granule = 16 * comm.size();
    EXPECT_GE(sharded.weight_bytes(), 4 * numel / comm.size());
    EXPECT_LE(sharded.weight_bytes(), 4 * (numel + buckets * granule) / comm.size());
    for (int step = 0; step < 4; ++step) {
      const auto a = replicated.step(wan_batch(comm.rank(), step, kPerRank));
      const auto b = sharded.step(wan_batch(comm.rank(), step, kPerRank));
      EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss) << "step " << step;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << "step " << step;
      if (step == 0) {
        EXPECT_GT(a.grad_norm, o.clip) << "the test means to clip";
      }
      EXPECT_LE(sharded.weight_bytes(), 4 * (numel + buckets * granule) / comm.size()) << "released after the step";
    }
    // While it computed: the root and at most 3 blocks (the one computing,
    // the next one's gather in flight, and in backward the one before whose
    // last gradient has not arrived yet), fp32 and padded per bucket.
    const auto* units = dynamic_cast<const wt::train::ZeroShards*>(sharded.parameter_units());
    ASSERT_NE(units, nullptr);
    const int64_t in_flight = 4 * (root + 3 * block + buckets * granule);
    EXPECT_GT(units->peak_gathered_bytes(), 4 * (root + block)) << "units were gathered";
    EXPECT_LE(units->peak_gathered_bytes(), in_flight);
    EXPECT_LT(in_flight, 4 * numel) << "the bound is below the whole model";
    // The weights (gathered from the slices) and the EMA. Gradients summed
    // in another order can round apart by an ulp, which Adam's
    // normalisation carries into the step of a weight whose gradient is
    // near zero (2e-6 measured): the floor is 1/4000 of the 4e-2 that 4
    // steps of lr 1e-2 can move a weight.
    constexpr double kWeightAtol = 1e-5;
    const auto weights = sharded.weights();
    const auto ema_a = replicated.ema_weights(), ema_b = sharded.ema_weights();
    ASSERT_EQ(weights.size(), named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      const auto& [name, w] = replicated_objective.trainable()[i];
      EXPECT_EQ(weights[i].first, name);
      EXPECT_TRUE(torch::allclose(weights[i].second, w, 1e-5, kWeightAtol)) << name;
      EXPECT_TRUE(torch::allclose(ema_b[i].second, ema_a[i].second, 1e-5, kWeightAtol)) << name;
    }
    // A forward without gradients (validation) gathers and releases every
    // unit; WholeWeights holds them for a forward on one rank alone.
    {
      torch::NoGradGuard no_grad;
      const auto batch = wan_batch(0, 9, 1);
      const auto want = replicated_objective.model()->forward(batch.at("x"), batch.at("t"), batch.at("context"));
      const auto got = sharded_objective.model()->forward(batch.at("x"), batch.at("t"), batch.at("context"));
      EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
      EXPECT_EQ(units->gathered_bytes(), 0);
      const wt::train::WholeWeights whole(sharded);
      EXPECT_GE(units->gathered_bytes(), 4 * numel);
      if (comm.rank() == 0) {
        const auto alone = sharded_objective.model()->forward(batch.at("x"), batch.at("t"), batch.at("context"));
        EXPECT_TRUE(torch::equal(alone, got));
      }
    }
    EXPECT_EQ(units->gathered_bytes(), 0);
  }
}

// A VACE model's VACE block is in the unit of the base block it follows
// (wan::zero_unit): gathered and released with it, never part of the root.
// The steps are the replicated steps, with blocks run plainly and
// checkpointed, and no more than the root and 3 units (the largest: base
// block 0 with VACE block 0) are gathered at once: less than the root with
// every VACE block, which a root holding them would gather for the step.
TEST(ZeroThree, AVaceBlockIsGatheredWithTheBaseBlockItFollows) {
  auto& comm = test_comm();
  auto config = wt::testing::small_wan_config(8);
  config.model_type = wt::wan::ModelType::VACE;
  config.vace_layers = {0, 1, 2, 3, 4, 5, 6, 7};
  config.vace_in_dim = 6;
  for (const int64_t checkpoint : {0, 1}) {
    SCOPED_TRACE(checkpoint ? "checkpointed blocks" : "plain blocks");
    EngineOptions o;
    o.micro_batch = kPerRank;
    o.schedule = {1e-2, wt::train::Schedule::Constant, 0, 10};
    o.clip = 0.5;
    WanRegression replicated_objective(checkpoint, config), sharded_objective(checkpoint, config);
    Engine replicated(comm, replicated_objective, o);
    o.zero = 3;
    Engine sharded(comm, sharded_objective, o);
    sharded_objective.model()->set_parameter_units(sharded.parameter_units());
    const auto& named = sharded_objective.trainable();
    int64_t numel = 0, root = 0, vace = 0;
    std::map<std::string, int64_t> units;
    for (const auto& [name, t] : named) {
      numel += t.numel();
      const std::string unit = wt::wan::zero_unit(config, name);
      units[unit] += t.numel();
      if (wt::nn::root_unit(unit)) root += t.numel();
      if (name.rfind("vace_blocks.", 0) == 0) {
        vace += t.numel();
        EXPECT_FALSE(wt::nn::root_unit(unit)) << name;
      }
    }
    const int64_t largest = units.at("blocks.0"), granule = 16 * comm.size(), buckets = 10;
    ASSERT_GT(largest, units.at("blocks.1")) << "block 0's unit holds VACE block 0 and its before_proj";
    ASSERT_GT(vace, 0);
    for (int step = 0; step < 3; ++step) {
      const auto a = replicated.step(wan_batch(comm.rank(), step, kPerRank, config.vace_in_dim));
      const auto b = sharded.step(wan_batch(comm.rank(), step, kPerRank, config.vace_in_dim));
      EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss) << "step " << step;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << "step " << step;
    }
    const auto* shards = dynamic_cast<const wt::train::ZeroShards*>(sharded.parameter_units());
    ASSERT_NE(shards, nullptr);
    EXPECT_EQ(shards->gathered_bytes(), 0);
    const int64_t in_flight = 4 * (root + 3 * largest + buckets * granule);
    EXPECT_LE(shards->peak_gathered_bytes(), in_flight);
    EXPECT_LT(in_flight, 4 * (root + vace)) << "the bound is below the root with every VACE block";
    const auto weights = sharded.weights();
    const WanRegression drawn(checkpoint, config);
    ASSERT_EQ(weights.size(), named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      const auto& [name, w] = replicated_objective.trainable()[i];
      EXPECT_TRUE(torch::allclose(weights[i].second, w, 1e-5, 1e-5)) << name;
      if (name == "vace_blocks.1.self_attn.q.weight") {  // the hints carried gradients into the VACE blocks
        EXPECT_GT((weights[i].second - drawn.trainable()[i].second).abs().max().item<double>(), 1e-3) << name;
      }
    }
  }
}

// bf16 gathers under bf16 autocast: the blocks' weights are bf16 while
// gathered (half the bytes), the fp32 slices are what AdamW updates, and
// the step is the replicated bf16 step up to the rounding of the norms' and
// modulation's weights to bf16, which autocast leaves in fp32 (2^-8
// relative): the loss within 2%, over 3 steps.
TEST(ZeroThree, Bf16GathersHalveTheUnitsAndTrainTheFp32Slices) {
  auto& comm = test_comm();
  EngineOptions o;
  o.micro_batch = kPerRank;
  o.schedule = {1e-2, wt::train::Schedule::Constant, 0, 10};
  o.compute_dtype = at::kBFloat16;
  WanRegression replicated_objective(0), sharded_objective(0);
  std::vector<at::Tensor> initial;
  for (const auto& [name, t] : sharded_objective.trainable()) initial.push_back(t.detach().clone());
  Engine replicated(comm, replicated_objective, o);
  o.zero = 3;
  o.gather_dtype = at::kBFloat16;
  Engine sharded(comm, sharded_objective, o);
  sharded_objective.model()->set_parameter_units(sharded.parameter_units());
  const auto& named = sharded_objective.trainable();
  const int64_t block = numel_of(named, "blocks.0"), root = numel_of(named, "") + numel_of(named, "head"),
                granule = 16 * comm.size();
  for (int step = 0; step < 3; ++step) {
    const auto a = replicated.step(wan_batch(comm.rank(), step, kPerRank));
    const auto b = sharded.step(wan_batch(comm.rank(), step, kPerRank));
    EXPECT_NEAR(b.loss, a.loss, 2e-2 * a.loss) << "step " << step;
    EXPECT_FALSE(b.skipped);
  }
  const auto* units = dynamic_cast<const wt::train::ZeroShards*>(sharded.parameter_units());
  EXPECT_LE(units->peak_gathered_bytes(), 4 * root + 2 * 3 * block + 4 * 6 * granule);
  EXPECT_EQ(units->parameter_shards()[1].scalar_type(), at::kFloat);
  // The fp32 slices moved: AdamW updated them, not a bf16 copy.
  const auto weights = sharded.weights();
  double moved = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(weights[i].second.scalar_type(), at::kFloat);
    moved = std::max(moved, (weights[i].second - initial[i]).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-3);
}

namespace {

// A model and a critic beside it (as distribution matching's student and
// fake score): two Wan models, two trained groups, each model's forward
// calling its own group's units.
class ModelAndCritic : public wt::train::Objective {
 public:
  ModelAndCritic()
      : model_(wt::testing::seeded_small_model(wt::testing::small_wan_config(4))),
        critic_(wt::testing::seeded_small_model(wt::testing::small_wan_config(4))),
        groups_(2) {
    for (const auto& item : model_->named_parameters()) groups_[0].parameters.emplace_back(item.key(), item.value());
    groups_[1].name = "critic";
    groups_[1].checkpoint_prefix = "critic.";
    groups_[1].ema = false;
    groups_[1].weights = false;
    for (const auto& item : critic_->named_parameters()) groups_[1].parameters.emplace_back(item.key(), item.value());
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  ObjectiveLoss loss(const Batch& b, const StepContext&) override {
    const auto model = (model_->forward(b.at("x"), b.at("t"), b.at("context")) - b.at("y")).square().mean();
    const auto critic = (critic_->forward(b.at("x"), b.at("t"), b.at("context")) + b.at("y")).square().mean();
    return {model + critic};
  }
  std::string kind() const override { return "model-and-critic"; }
  at::Tensor validation_losses(const Batch&) override { return {}; }
  wt::wan::WanModel& model() { return model_; }
  wt::wan::WanModel& critic() { return critic_; }

 private:
  wt::wan::WanModel model_, critic_;
  std::vector<wt::train::ParameterGroup> groups_;
};

}  // namespace

// Under ZeRO-3 a second trained group is sharded by its own units: each
// group's norm, and every weight of both models (gathered by the
// checkpoint), are the replicated run's.
TEST(ZeroThree, ASecondGroupIsShardedByItsOwnUnits) {
  auto& comm = test_comm();
  EngineOptions o;
  o.micro_batch = kPerRank;
  o.schedule = {1e-2, wt::train::Schedule::Constant, 0, 10};
  o.clip = 0.5;
  o.ema_decay = 0.8;
  ModelAndCritic replicated_objective, sharded_objective;
  Engine replicated(comm, replicated_objective, o);
  o.zero = 3;
  Engine sharded(comm, sharded_objective, o);
  ASSERT_NE(sharded.parameter_units(1), nullptr);
  ASSERT_NE(sharded.parameter_units(1), sharded.parameter_units(0));
  sharded_objective.model()->set_parameter_units(sharded.parameter_units(0));
  sharded_objective.critic()->set_parameter_units(sharded.parameter_units(1));
  for (int step = 0; step < 3; ++step) {
    const auto a = replicated.step(wan_batch(comm.rank(), step, kPerRank));
    const auto b = sharded.step(wan_batch(comm.rank(), step, kPerRank));
    EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss) << "step " << step;
    ASSERT_EQ(b.group_norms.size(), 2u);
    for (size_t g = 0; g < 2; ++g)
      EXPECT_NEAR(b.group_norms[g].second, a.group_norms[g].second, 1e-5 * a.group_norms[g].second) << "group " << g;
  }
  const auto* units = dynamic_cast<const wt::train::ZeroShards*>(sharded.parameter_units());
  ASSERT_NE(units, nullptr);
  EXPECT_EQ(units->gathered_bytes(), 0) << "both models' units released after the step";
  wt::ckpt::Checkpoint want, got;
  replicated.save_state(want);
  sharded.save_state(got);
  for (auto* c : {&want, &got})
    if (c->filled.valid()) c->filled.wait();
  if (comm.rank() != 0) return;
  ASSERT_EQ(got.model.size(), want.model.size());
  for (size_t i = 0; i < want.model.size(); ++i) {
    EXPECT_EQ(got.model[i].first, want.model[i].first);
    EXPECT_TRUE(torch::allclose(got.model[i].second, want.model[i].second, 1e-5, 1e-5)) << want.model[i].first;
  }
  EXPECT_EQ(want.model.back().first.rfind("critic.", 0), 0u) << "the critic's weights are compared too";
}
