// The flow-matching objective and the Euler sampler, against their formulas.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/wan/euler_sampler.hpp"
#include "wantrain/wan/flow_matching.hpp"

using namespace wt::wan;

TEST(FlowMatching, ShiftFormula) {
  EXPECT_DOUBLE_EQ(shift_sigma(0.5, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(shift_sigma(0.0, 5.0), 0.0);
  EXPECT_DOUBLE_EQ(shift_sigma(1.0, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(shift_sigma(0.5, 5.0), 2.5 / 3.0);
  EXPECT_DOUBLE_EQ(shift_sigma(0.2, 3.0), 0.6 / 1.4);
}

TEST(FlowMatching, NoisyInputTimestepAndTargetFollowTheFormula) {
  torch::manual_seed(1);
  const auto x0 = torch::randn({3, 4, 2, 4, 4});
  const auto batch = make_noisy_batch(x0, {10, 11, 12}, 7, 3, {});
  const auto eps = batch.target + x0;  // target = eps - x0
  const auto s = batch.sigmas.view({3, 1, 1, 1, 1});
  EXPECT_TRUE(torch::allclose(batch.x_t, (1 - s) * x0 + s * eps, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(batch.timesteps, batch.sigmas * 1000));
  EXPECT_GT(batch.sigmas.min().item<float>(), 0.0f);
  EXPECT_LT(batch.sigmas.max().item<float>(), 1.0f);
  // eps is standard normal noise
  EXPECT_NEAR(eps.mean().item<double>(), 0.0, 0.15);
  EXPECT_NEAR(eps.std().item<double>(), 1.0, 0.15);
}

TEST(FlowMatching, NoiseDependsOnSampleNotOnBatchSplit) {
  torch::manual_seed(2);
  const auto x0 = torch::randn({4, 2, 1, 2, 2});
  const auto whole = make_noisy_batch(x0, {7, 3, 9, 1}, 5, 11, {});
  const auto first = make_noisy_batch(x0.slice(0, 0, 2), {7, 3}, 5, 11, {});
  const auto second = make_noisy_batch(x0.slice(0, 2, 4), {9, 1}, 5, 11, {});
  EXPECT_TRUE(torch::equal(whole.x_t, torch::cat({first.x_t, second.x_t})));
  EXPECT_TRUE(torch::equal(whole.sigmas, torch::cat({first.sigmas, second.sigmas})));
  const auto next_step = make_noisy_batch(x0, {7, 3, 9, 1}, 5, 12, {});
  EXPECT_FALSE(torch::equal(whole.target, next_step.target));
  const auto other_seed = make_noisy_batch(x0, {7, 3, 9, 1}, 6, 11, {});
  EXPECT_FALSE(torch::equal(whole.target, other_seed.target));
}

TEST(FlowMatching, TimestepSamplingDistributions) {
  const auto x0 = torch::zeros({2000, 1, 1, 1, 1});
  std::vector<int64_t> indices(2000);
  for (int64_t i = 0; i < 2000; ++i) indices[i] = i;
  FlowMatchingOptions uniform;
  uniform.shift = 1.0;
  const auto u = make_noisy_batch(x0, indices, 0, 0, uniform).sigmas;
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.02);
  EXPECT_NEAR(u.var().item<double>(), 1.0 / 12.0, 0.01);
  FlowMatchingOptions logit = uniform;
  logit.sampling = TimestepSampling::LogitNormal;
  logit.logit_mean = 1.0;
  logit.logit_std = 0.5;
  const auto l = make_noisy_batch(x0, indices, 0, 0, logit).sigmas;
  const auto logits = torch::log(l / (1 - l));  // normal(1, 0.5)
  EXPECT_NEAR(logits.mean().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(logits.std().item<double>(), 0.5, 0.05);
  // the shift moves sigma up: mean of s*u/(1+(s-1)*u) for s = 5
  FlowMatchingOptions shifted = uniform;
  shifted.shift = 5.0;
  const auto sh = make_noisy_batch(x0, indices, 0, 0, shifted).sigmas;
  EXPECT_TRUE(torch::allclose(sh, 5 * u / (1 + 4 * u), 1e-5, 1e-6));
}

// --timestep-range: each row's sigma is the full-range sigma of the same
// draw mapped into [min, max], noise and all.
TEST(FlowMatching, ATimestepRangeMapsEachDrawIntoIt) {
  torch::manual_seed(0);
  const auto x0 = torch::randn({64, 2, 1, 2, 2});
  std::vector<int64_t> indices(64);
  for (int64_t i = 0; i < 64; ++i) indices[i] = i;
  for (const auto sampling : {TimestepSampling::Uniform, TimestepSampling::LogitNormal}) {
    FlowMatchingOptions full;
    full.sampling = sampling;
    FlowMatchingOptions expert = full;
    expert.sigma_min = 0.875;
    expert.sigma_max = 1.0;
    const auto a = make_noisy_batch(x0, indices, 3, 5, full), b = make_noisy_batch(x0, indices, 3, 5, expert);
    const auto expected = 0.875 + 0.125 * a.sigmas.to(torch::kFloat64);
    EXPECT_TRUE(torch::allclose(b.sigmas.to(torch::kFloat64), expected, 0, 1e-6));
    EXPECT_GE(b.sigmas.min().item<float>(), 0.875f);
    EXPECT_LE(b.sigmas.max().item<float>(), 1.0f);
    EXPECT_TRUE(torch::equal(b.target, a.target));  // the same noise
  }
}

TEST(FlowMatching, LossIsMeanSquaredError) {
  const auto a = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}), b = torch::tensor({0.0f, 2.0f, 5.0f, 4.0f});
  EXPECT_FLOAT_EQ(flow_matching_loss(a, b).item<float>(), (1.0f + 4.0f) / 4.0f);
  EXPECT_EQ(flow_matching_loss(a.to(torch::kBFloat16), b).scalar_type(), torch::kFloat32);
}

TEST(EulerSampler, SigmasRunFromOneToZeroShifted) {
  const auto sigmas = sampling_sigmas(4, 3.0);
  ASSERT_EQ(sigmas.size(), 5u);
  EXPECT_DOUBLE_EQ(sigmas.front(), 1.0);
  EXPECT_DOUBLE_EQ(sigmas.back(), 0.0);
  EXPECT_DOUBLE_EQ(sigmas[2], shift_sigma(0.5, 3.0));
}

// With the exact velocity field of a known x0, v(x, sigma) = (x - x0) / sigma,
// every Euler step keeps x on the straight path to x0 and the last lands on it.
TEST(EulerSampler, ExactVelocityFieldReturnsX0) {
  torch::manual_seed(3);
  const auto x0 = torch::randn({2, 3, 2, 4, 4});
  const auto noise = torch::randn({2, 3, 2, 4, 4});
  int calls = 0;
  VelocityField exact = [&](const at::Tensor& x, const at::Tensor& t, bool) {
    ++calls;
    return (x - x0) / (t / 1000.0).view({-1, 1, 1, 1, 1});
  };
  for (double cfg : {1.0, 4.0}) {
    calls = 0;
    const auto sample = euler_sample(noise, exact, {10, 5.0, cfg});
    EXPECT_TRUE(torch::allclose(sample, x0, 1e-4, 1e-4)) << (sample - x0).abs().max();
    EXPECT_EQ(calls, cfg == 1.0 ? 10 : 20);
  }
  // guidance extrapolates away from the unconditional prediction
  VelocityField guided = [&](const at::Tensor& x, const at::Tensor& t, bool conditional) {
    return conditional ? (x - x0) / (t / 1000.0).view({-1, 1, 1, 1, 1}) : torch::zeros_like(x);
  };
  const auto once = euler_sample(noise, guided, {1, 1.0, 2.0});
  EXPECT_TRUE(torch::allclose(once, noise - 2.0 * (noise - x0), 1e-5, 1e-5));
}

// --cfg 0 follows the unconditional field alone, one model call per step.
TEST(EulerSampler, ZeroGuidanceIsTheUnconditionalFieldAlone) {
  torch::manual_seed(4);
  const auto x0 = torch::randn({1, 2, 1, 2, 2});
  const auto noise = torch::randn({1, 2, 1, 2, 2});
  int conditional_calls = 0, unconditional_calls = 0;
  VelocityField field = [&](const at::Tensor& x, const at::Tensor& t, bool conditional) {
    ++(conditional ? conditional_calls : unconditional_calls);
    return conditional ? torch::full_like(x, 1e6) : (x - x0) / (t / 1000.0).view({-1, 1, 1, 1, 1});
  };
  const auto sample = euler_sample(noise, field, {6, 3.0, 0.0});
  EXPECT_TRUE(torch::allclose(sample, x0, 1e-4, 1e-4)) << (sample - x0).abs().max();
  EXPECT_EQ(conditional_calls, 0);
  EXPECT_EQ(unconditional_calls, 6);
}
