// The Engine on a toy objective (a linear least-squares fit), in process on
// the test world's ranks: the averaged gradient, accumulation, clipping, EMA
// and the non-finite skip against values derived by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <vector>

#include "wantrain/ckpt/checkpoint.hpp"
#include "wantrain/distributed/comm.hpp"
#include "mpi_test_env.hpp"
#include "wantrain/train/ema.hpp"
#include "wantrain/train/engine.hpp"

namespace {

using wt::train::Batch;
using wt::train::Engine;
using wt::train::EngineOptions;
using wt::train::NamedTensors;
using wt::train::ObjectiveLoss;
using wt::train::StepContext;

constexpr int kPerRank = 2;  // samples per rank and step

// loss = mean over the micro-batch of (w . x_i - y_i)^2, w [2] from zero.
class LeastSquares : public wt::train::Objective {
 public:
  LeastSquares() : w_(torch::zeros({2}, torch::requires_grad())), groups_(1) {
    groups_.front().parameters.emplace_back("w", w_);
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  ObjectiveLoss loss(const Batch& batch, const StepContext&) override {
    return {(batch.at("x").matmul(w_) - batch.at("y")).square().mean()};
  }
  std::string kind() const override { return "least-squares"; }
  at::Tensor validation_losses(const Batch& batch) override {
    return (batch.at("x").matmul(w_) - batch.at("y")).square().to(torch::kFloat64);
  }
  at::Tensor w() const { return w_.detach().clone(); }

 private:
  at::Tensor w_;
  std::vector<wt::train::ParameterGroup> groups_;
};

// Sample i of the whole step (rank r holds i = r * kPerRank + j): values
// that differ per sample, so that the ranks' gradients differ.
std::pair<double, double> x_of(int i) { return {1.0 + i, 0.5 - 0.25 * i}; }
double y_of(int i) { return 2.0 - 0.5 * i; }

Batch rank_batch(int rank, bool poison = false) {
  Batch b;
  auto x = torch::empty({kPerRank, 2}, torch::kFloat64), y = torch::empty({kPerRank}, torch::kFloat64);
  for (int j = 0; j < kPerRank; ++j) {
    const int i = rank * kPerRank + j;
    x[j][0] = x_of(i).first;
    x[j][1] = x_of(i).second;
    y[j] = poison && j == 0 ? std::nan("") : y_of(i);
    b.indices.push_back(i);
  }
  b.tensors.emplace("x", x.to(torch::kFloat32));
  b.tensors.emplace("y", y.to(torch::kFloat32));
  return b;
}

// The gradient at w = 0 of the mean loss over every sample of every rank:
// -(2/N) sum_i y_i x_i.
std::vector<double> gradient_at_zero(int ranks) {
  const int n = ranks * kPerRank;
  std::vector<double> g(2, 0.0);
  for (int i = 0; i < n; ++i) {
    g[0] -= 2.0 / n * y_of(i) * x_of(i).first;
    g[1] -= 2.0 / n * y_of(i) * x_of(i).second;
  }
  return g;
}

// AdamW with betas (0, 0), eps 1, no weight decay and lr 1 makes the first
// update readable: w_j = -g_j / (|g_j| + 1), with g the clipped gradient.
EngineOptions readable_options(int accumulation, int64_t micro_batch, double clip, double ema_decay) {
  EngineOptions o;
  o.micro_batch = micro_batch;
  o.accumulation = accumulation;
  o.schedule = {1.0, wt::train::Schedule::Constant, 0, 10};
  o.adamw = {0.0, 0.0, 0.0, 1.0};
  o.clip = clip;
  o.ema_decay = ema_decay;
  return o;
}

TEST(Engine, FirstStepFollowsTheAveragedClippedGradientAndTheEma) {
  auto& comm = test_comm();
  const auto g = gradient_at_zero(comm.size());
  const double norm = std::hypot(g[0], g[1]);
  const double clip = norm / 2;  // halves the gradient
  const double scale = clip / (norm + 1e-6);
  for (const auto& [k, b] : {std::pair{1, int64_t(kPerRank)}, std::pair{kPerRank, int64_t(1)}}) {
    LeastSquares objective;
    Engine engine(comm, objective, readable_options(k, b, clip, 0.9));
    const auto result = engine.step(rank_batch(comm.rank()));
    EXPECT_FALSE(result.skipped);
    EXPECT_EQ(result.step, 1);
    EXPECT_NEAR(result.grad_norm, norm, 1e-5 * norm) << "accumulation " << k;
    // The logged loss at w = 0 is the mean of y^2 over every sample.
    double loss = 0;
    for (int i = 0; i < comm.size() * kPerRank; ++i) loss += y_of(i) * y_of(i) / (comm.size() * kPerRank);
    EXPECT_NEAR(result.loss, loss, 1e-5 * loss);
    const auto w = objective.w();
    for (int j = 0; j < 2; ++j) {
      const double gc = g[j] * scale;
      EXPECT_NEAR(w[j].item<double>(), -gc / (std::abs(gc) + 1.0), 1e-5) << "accumulation " << k << " w" << j;
      // EMA from w0 = 0: 0.9 * 0 + 0.1 * w1.
      EXPECT_NEAR(engine.ema()->averages()[0].second[j].item<double>(), 0.1 * w[j].item<double>(), 1e-6);
    }
  }
}

// On the CPU the snapshot's copies finish beside the next step: the
// checkpoint holds the state of the moment save_state was called (weights,
// EMA, moments), not the next step's, because the next update waits for
// them. The copies are held back 0.3 s (a test hook), far longer than a
// step of this toy objective: a step that did not wait would return first.
TEST(Engine, ASnapshotHoldsTheStateOfItsStepWhileTheNextStepRuns) {
  auto& comm = test_comm();
  LeastSquares objective;
  Engine engine(comm, objective, readable_options(1, kPerRank, 0, 0.9));
  for (int i = 0; i < 2; ++i) engine.step(rank_batch(comm.rank()));
  const auto w = objective.w();
  const auto ema = engine.ema()->averages()[0].second.clone();
  wt::ckpt::Checkpoint c;
  setenv("WANTRAIN_TEST_DELAY", "snapshot_copy:0.3", 1);
  engine.save_state(c);
  ASSERT_TRUE(c.filled.valid());
  engine.step(rank_batch(comm.rank()));
  EXPECT_EQ(c.filled.wait_for(std::chrono::seconds(0)), std::future_status::ready) << "the update did not wait";
  unsetenv("WANTRAIN_TEST_DELAY");
  for (int i = 0; i < 2; ++i) engine.step(rank_batch(comm.rank()));
  ASSERT_FALSE(torch::equal(objective.w(), w));  // the steps moved w: the test can tell the two apart
  c.filled.get();
  EXPECT_TRUE(torch::equal(c.model.at(0).second, w));
  EXPECT_TRUE(torch::equal(c.ema.at(0).second, ema));
  EXPECT_EQ(c.state.step, 2);
  ASSERT_EQ(c.optim.size(), 1u);
  EXPECT_EQ(c.optim[0].step, 2);
  // A second snapshot into the same slots shows the later state.
  engine.save_state(c);
  c.filled.get();
  EXPECT_TRUE(torch::equal(c.model.at(0).second, objective.w()));
  EXPECT_EQ(c.state.step, 5);
}

TEST(Engine, ANonFiniteLossOnOneRankSkipsTheStepOnEveryRank) {
  auto& comm = test_comm();
  LeastSquares objective;
  Engine engine(comm, objective, readable_options(1, kPerRank, 0.0, 0.5));
  const auto result = engine.step(rank_batch(comm.rank(), /*poison=*/comm.rank() == comm.size() - 1));
  EXPECT_TRUE(result.skipped);
  EXPECT_EQ(engine.skipped_steps(), 1);
  EXPECT_EQ(engine.steps_taken(), 1);
  EXPECT_TRUE(torch::equal(objective.w(), torch::zeros({2})));
  EXPECT_TRUE(torch::equal(engine.ema()->averages()[0].second, torch::zeros({2})));
  // The next, finite step updates as a first step would (AdamW has no state yet).
  const auto next = engine.step(rank_batch(comm.rank()));
  EXPECT_FALSE(next.skipped);
  const auto g = gradient_at_zero(comm.size());
  for (int j = 0; j < 2; ++j)
    EXPECT_NEAR(objective.w()[j].item<double>(), -g[j] / (std::abs(g[j]) + 1.0), 1e-5) << "w" << j;
}

// A small two-layer regression with parameters of assorted sizes, so that
// small buckets split them across buckets and ranks' slices.
NamedTensors two_layer_weights(uint64_t seed) {
  torch::manual_seed(seed);
  NamedTensors out;
  for (auto [name, shape] :
       {std::pair<const char*, std::vector<int64_t>>{"w1", {37, 5}}, {"b1", {37}}, {"w2", {3, 37}}, {"b2", {3}}})
    out.emplace_back(name, (0.3 * torch::randn(shape)).requires_grad_());
  return out;
}

at::Tensor two_layer_loss(const NamedTensors& p, const Batch& batch) {
  const auto hidden = torch::tanh(batch.at("x").matmul(p[0].second.t()) + p[1].second);
  return (hidden.matmul(p[2].second.t()) + p[3].second - batch.at("y")).square().mean();
}

class TwoLayers : public wt::train::Objective {
 public:
  explicit TwoLayers(uint64_t seed = 11) : groups_(1) { groups_.front().parameters = two_layer_weights(seed); }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  ObjectiveLoss loss(const Batch& batch, const StepContext&) override {
    return {two_layer_loss(groups_.front().parameters, batch)};
  }
  std::string kind() const override { return "two-layers"; }
  at::Tensor validation_losses(const Batch&) override { return {}; }

  std::vector<wt::train::ParameterGroup> groups_;
};

Batch random_batch(int rank, int step) {
  torch::manual_seed(1000 * step + rank);
  Batch b;
  b.tensors.emplace("x", torch::randn({kPerRank, 5}));
  b.tensors.emplace("y", torch::randn({kPerRank, 3}));
  for (int j = 0; j < kPerRank; ++j) b.indices.push_back(rank * kPerRank + j);
  return b;
}

// ZeRO-1 is the same optimisation: the same losses, gradient norms, weights
// and EMA as replicated AdamW (elementwise arithmetic on slices of the same
// reduced gradients), with 1/W of the AdamW moments and EMA on each rank.
TEST(Engine, ZeroOneTakesTheSameStepsWithItsShareOfTheState) {
  auto& comm = test_comm();
  EngineOptions o;
  o.micro_batch = kPerRank;
  o.schedule = {3e-2, wt::train::Schedule::Constant, 0, 10};
  o.clip = 0.5;
  o.ema_decay = 0.8;
  o.bucket_bytes = 400;  // several buckets, parameters split across ranks' slices
  TwoLayers replicated_objective, sharded_objective;
  Engine replicated(comm, replicated_objective, o);
  o.zero = 1;
  Engine sharded(comm, sharded_objective, o);
  for (int step = 0; step < 4; ++step) {
    const auto a = replicated.step(random_batch(comm.rank(), step));
    const auto b = sharded.step(random_batch(comm.rank(), step));
    EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss) << "step " << step;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-6 * a.grad_norm) << "step " << step;
    if (step == 0) {
      EXPECT_GT(a.grad_norm, o.clip) << "the test means to clip";
    }
  }
  const auto ema_a = replicated.ema_weights(), ema_b = sharded.ema_weights();
  ASSERT_EQ(ema_a.size(), 4u);
  ASSERT_EQ(ema_b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const auto& [name, w] = replicated_objective.trainable()[i];
    EXPECT_TRUE(torch::allclose(sharded_objective.trainable()[i].second, w, 1e-6, 1e-7)) << name;
    EXPECT_EQ(ema_b[i].first, name);
    EXPECT_TRUE(torch::allclose(ema_b[i].second, ema_a[i].second, 1e-6, 1e-7)) << name;
    // The model's weights moved away from their EMA: the comparison has something to compare.
    EXPECT_FALSE(torch::allclose(ema_a[i].second, w, 1e-4, 1e-5)) << name;
  }
  // Moments (2) and EMA (1) of every parameter, 4 bytes each: whole without
  // sharding, 1/W of the buckets (padded to 16 W elements each) with it.
  int64_t numel = 0;
  for (const auto& [name, w] : replicated_objective.trainable()) numel += w.numel();
  EXPECT_EQ(replicated.state_bytes(), 3 * 4 * numel);
  const int64_t buckets = 4;  // at most one per parameter with 400-byte buckets
  EXPECT_GE(sharded.state_bytes(), 3 * 4 * numel / comm.size());
  EXPECT_LE(sharded.state_bytes(), 3 * 4 * (numel / comm.size() + buckets * 16));
}

}  // namespace

// ZeRO-2 is the same optimisation again, with the gradients sharded too: it
// reduces every micro-step (here 2) instead of once, so the sums differ in
// order only, and after a step it holds only its slices of the gradients.
TEST(Engine, ZeroTwoTakesTheSameStepsAndKeepsOnlyItsGradientSlices) {
  auto& comm = test_comm();
  EngineOptions o;
  o.micro_batch = kPerRank / 2;
  o.accumulation = 2;
  o.schedule = {3e-2, wt::train::Schedule::Constant, 0, 10};
  o.clip = 0.5;
  o.ema_decay = 0.8;
  o.bucket_bytes = 400;
  TwoLayers replicated_objective, sharded_objective;
  Engine replicated(comm, replicated_objective, o);
  o.zero = 2;
  Engine sharded(comm, sharded_objective, o);
  for (int step = 0; step < 4; ++step) {
    const auto a = replicated.step(random_batch(comm.rank(), step));
    const auto b = sharded.step(random_batch(comm.rank(), step));
    EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss) << "step " << step;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << "step " << step;
  }
  const auto ema_a = replicated.ema_weights(), ema_b = sharded.ema_weights();
  ASSERT_EQ(ema_b.size(), 4u);
  int64_t numel = 0;
  for (size_t i = 0; i < 4; ++i) {
    const auto& [name, w] = replicated_objective.trainable()[i];
    numel += w.numel();
    EXPECT_TRUE(torch::allclose(sharded_objective.trainable()[i].second, w, 1e-5, 1e-7)) << name;
    EXPECT_TRUE(torch::allclose(ema_b[i].second, ema_a[i].second, 1e-5, 1e-7)) << name;
  }
  // fp32 gradients: whole without ZeRO; 1/W of the padded buckets with ZeRO-2.
  const int64_t buckets = 4;
  EXPECT_EQ(replicated.gradient_bytes(), 4 * numel);
  EXPECT_GE(sharded.gradient_bytes(), 4 * numel / comm.size());
  EXPECT_LE(sharded.gradient_bytes(), 4 * (numel / comm.size() + buckets * 16));
  EXPECT_LE(sharded.state_bytes(), 3 * 4 * (numel / comm.size() + buckets * 16));
}

namespace {

// The test Comm, counting the collectives issued through it: what the
// Engine's step costs in synchronisations, measured on the real MPI path.
class CountingComm final : public wt::distributed::Comm {
 public:
  explicit CountingComm(wt::distributed::Comm& real) : real_(real) {}
  const char* backend() const override { return real_.backend(); }
  int rank() const override { return real_.rank(); }
  int size() const override { return real_.size(); }
  at::Device device() const override { return real_.device(); }
  wt::distributed::WorkPtr all_reduce_async(const at::Tensor& t, const wt::distributed::AllReduceOptions& o) override {
    ++issued;
    return real_.all_reduce_async(t, o);
  }
  wt::distributed::WorkPtr broadcast_async(const at::Tensor& t, const wt::distributed::BroadcastOptions& o) override {
    ++issued;
    return real_.broadcast_async(t, o);
  }
  wt::distributed::WorkPtr all_gather_async(const at::Tensor& out, const at::Tensor& in,
                                            const wt::distributed::AllGatherOptions& o) override {
    ++issued;
    return real_.all_gather_async(out, in, o);
  }
  wt::distributed::WorkPtr reduce_scatter_async(const at::Tensor& out, const at::Tensor& in,
                                                const wt::distributed::ReduceScatterOptions& o) override {
    ++issued;
    return real_.reduce_scatter_async(out, in, o);
  }
  wt::distributed::WorkPtr all_to_all_async(const at::Tensor& out, const at::Tensor& in,
                                            const wt::distributed::AllToAllOptions& o) override {
    ++issued;
    return real_.all_to_all_async(out, in, o);
  }
  wt::distributed::WorkPtr barrier_async(const wt::distributed::BarrierOptions& o) override {
    ++issued;
    return real_.barrier_async(o);
  }
  std::unique_ptr<wt::distributed::Comm> split(int color) override { return real_.split(color); }
  int64_t issued = 0;

 private:
  wt::distributed::Comm& real_;
};

}  // namespace

// One step costs its gradient buckets plus one reduction of the step's
// figures (with ZeRO, plus the weights' all-gather), and one host read,
// whatever the accumulation (ZeRO-2 reduces each micro-step's buckets), with
// or without a skip.
TEST(Engine, AStepIsItsBucketsPlusOneCollectiveAndOneHostRead) {
  CountingComm comm(test_comm());
  for (const int zero : {0, 1, 2}) {
    for (const int k : {1, kPerRank}) {
      SCOPED_TRACE("zero " + std::to_string(zero) + ", accumulation " + std::to_string(k));
      LeastSquares objective;  // one parameter: one bucket
      EngineOptions options = readable_options(k, kPerRank / k, 1.0, 0.9);
      options.zero = zero;
      Engine engine(comm, objective, options);
      for (const bool poison : {false, true}) {
        const int64_t before = comm.issued;
        const auto result = engine.step(rank_batch(comm.rank(), poison && comm.rank() == 0));
        EXPECT_EQ(result.skipped, poison);
        // The bucket (with ZeRO-2 once per micro-step), the figures, the all-gather.
        const int64_t expected = (zero == 2 ? k : 1) + 1 + (zero >= 1 && !poison ? 1 : 0);
        EXPECT_EQ(comm.issued - before, expected);
        EXPECT_EQ(result.host_reads, 1);
      }
    }
  }
}

// The caller's flags travel in the step's reduction: every rank learns the
// highest stop signal and any failed write, whichever rank had them.
TEST(Engine, StopSignalsAndFailedWritesAreAgreedInTheStep) {
  auto& comm = test_comm();
  LeastSquares objective;
  Engine engine(comm, objective, readable_options(1, kPerRank, 1.0, 0.0));
  const auto none = engine.step(rank_batch(comm.rank()));
  EXPECT_EQ(none.stop_signal, 0);
  EXPECT_FALSE(none.write_failed);
  const int last = comm.size() - 1;
  wt::train::StepFlags flags;
  flags.write_failed = comm.rank() == 0;
  flags.stop_signal = [&] { return comm.rank() == last ? 15 : (comm.rank() == 0 ? 10 : 0); };
  const auto flagged = engine.step(rank_batch(comm.rank()), flags);
  EXPECT_EQ(flagged.stop_signal, 15);  // the highest: SIGTERM (the last rank's) over SIGUSR1 (rank 0's)
  EXPECT_TRUE(flagged.write_failed);
  EXPECT_FALSE(flagged.skipped);
}

namespace {

// A model and a critic trained beside it, as distribution matching trains
// its fake score: independent parameters, the loss their sum, the critic a
// group of its own (clipped at its own bound, a scaled learning rate, no
// EMA, not the model's weights).
class ModelAndCritic : public wt::train::Objective {
 public:
  explicit ModelAndCritic(double critic_clip) : groups_(2) {
    groups_[0].parameters = two_layer_weights(11);
    auto& critic = groups_[1];
    critic.name = "critic";
    critic.checkpoint_prefix = "critic.";
    critic.parameters = two_layer_weights(12);
    critic.clip = critic_clip;
    critic.ema = false;
    critic.weights = false;
    critic.lr_scale = 0.5;
  }
  const std::vector<wt::train::ParameterGroup>& groups() const override { return groups_; }
  std::vector<at::Tensor> buffers() const override { return {}; }
  ObjectiveLoss loss(const Batch& batch, const StepContext&) override {
    return {two_layer_loss(groups_[0].parameters, batch) + two_layer_loss(groups_[1].parameters, batch)};
  }
  std::string kind() const override { return "model-and-critic"; }
  at::Tensor validation_losses(const Batch&) override { return {}; }

  std::vector<wt::train::ParameterGroup> groups_;
};

}  // namespace

// Each group is trained as if it were trained alone with its own settings:
// its own norm and clip (the model's clip does not see the critic's
// gradient), its learning rate, its EMA or none; under ZeRO-1 and -2 too.
// What leaves the Engine as the model (weights, EMA, the samplers' weights)
// is the model's group only, and a checkpoint records both groups.
TEST(Engine, EachParameterGroupIsTrainedAsIfAloneAndOnlyTheModelLeaves) {
  auto& comm = test_comm();
  const double critic_clip = 0.05;
  for (const int zero : {0, 1, 2}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    EngineOptions o;
    o.micro_batch = kPerRank;
    o.schedule = {3e-2, wt::train::Schedule::Constant, 0, 10};
    o.clip = 0.5;
    o.ema_decay = 0.8;
    o.bucket_bytes = 400;
    o.zero = zero;
    ModelAndCritic both(critic_clip);
    Engine engine(comm, both, o);
    // The same two models, each in an Engine of its own, with the group's settings.
    TwoLayers model(11), critic(12);
    Engine model_alone(comm, model, o);
    auto critic_options = o;
    critic_options.clip = critic_clip;
    critic_options.ema_decay = 0;
    critic_options.schedule.peak *= 0.5;
    Engine critic_alone(comm, critic, critic_options);
    for (int step = 0; step < 3; ++step) {
      const auto together = engine.step(random_batch(comm.rank(), step));
      const auto a = model_alone.step(random_batch(comm.rank(), step));
      const auto b = critic_alone.step(random_batch(comm.rank(), step));
      ASSERT_EQ(together.group_norms.size(), 2u);
      EXPECT_EQ(together.group_norms[1].first, "critic");
      EXPECT_NEAR(together.grad_norm, a.grad_norm, 1e-6 * a.grad_norm) << "step " << step;
      EXPECT_NEAR(together.group_norms[1].second, b.grad_norm, 1e-6 * b.grad_norm) << "step " << step;
      if (step == 0) {
        EXPECT_GT(b.grad_norm, 10 * critic_clip) << "the test means the critic's clip to bite";
      }
    }
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(
          torch::allclose(both.groups_[0].parameters[i].second, model.groups_[0].parameters[i].second, 1e-6, 1e-7));
      EXPECT_TRUE(
          torch::allclose(both.groups_[1].parameters[i].second, critic.groups_[0].parameters[i].second, 1e-6, 1e-7));
    }
    // The model only, under its own names: weights, EMA, the samplers' weights.
    const auto ema = engine.ema_weights(), ema_alone = model_alone.ema_weights();
    ASSERT_EQ(ema.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(ema[i].first, ema_alone[i].first);
      EXPECT_TRUE(torch::allclose(ema[i].second, ema_alone[i].second, 1e-6, 1e-7)) << ema[i].first;
    }
    EXPECT_EQ(engine.weights().size(), 4u);
    std::vector<std::string> sampled;
    engine.each_sampling_weight([&](const std::string& name, const at::Tensor&) { sampled.push_back(name); });
    std::sort(sampled.begin(), sampled.end());  // with ZeRO in bucket order
    EXPECT_EQ(sampled, (std::vector<std::string>{"b1", "b2", "w1", "w2"}));
    // The checkpoint: both groups' weights and moments, the model's EMA
    // only (whole, or in this rank's slices), and the record of the groups.
    wt::ckpt::Checkpoint saved;
    engine.save_state(saved);
    if (saved.filled.valid()) saved.filled.wait();
    ASSERT_EQ(saved.groups.size(), 2u);
    EXPECT_EQ(saved.groups[1].prefix, "critic.");
    EXPECT_FALSE(saved.groups[1].ema);
    EXPECT_FALSE(saved.groups[1].weights);
    if (zero == 0) {
      EXPECT_EQ(saved.model.size(), 8u);
      EXPECT_EQ(saved.model[4].first, "critic.w1");
      EXPECT_EQ(saved.ema.size(), 4u);
    } else {
      for (const auto& slice : saved.shard.slices)
        EXPECT_EQ(slice.ema.defined(), slice.name.rfind("critic.", 0) != 0) << slice.name;
    }
  }
}
