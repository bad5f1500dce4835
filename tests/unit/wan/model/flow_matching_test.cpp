// The flow-matching objective and the sampling loop with Euler steps, against their formulas.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/sample/sampler.hpp"

using namespace wt::wan;

namespace {
SamplerOptions euler(int steps, double shift, double cfg) {
  SamplerOptions options;
  options.solver = Solver::Euler;
  options.steps = steps;
  options.shift = shift;
  options.cfg = cfg;
  return options;
}
}  // namespace

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
    const auto sample = sample_flow(noise, exact, euler(10, 5.0, cfg));
    EXPECT_TRUE(torch::allclose(sample, x0, 1e-4, 1e-4)) << (sample - x0).abs().max();
    EXPECT_EQ(calls, cfg == 1.0 ? 10 : 20);
  }
  // guidance extrapolates away from the unconditional prediction
  VelocityField guided = [&](const at::Tensor& x, const at::Tensor& t, bool conditional) {
    return conditional ? (x - x0) / (t / 1000.0).view({-1, 1, 1, 1, 1}) : torch::zeros_like(x);
  };
  const auto once = sample_flow(noise, guided, euler(1, 1.0, 2.0));
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
  const auto sample = sample_flow(noise, field, euler(6, 3.0, 0.0));
  EXPECT_TRUE(torch::allclose(sample, x0, 1e-4, 1e-4)) << (sample - x0).abs().max();
  EXPECT_EQ(conditional_calls, 0);
  EXPECT_EQ(unconditional_calls, 6);
}

// Wan2.2 A14B: the steps at t >= boundary * 1000 go to the high-noise expert
// with its own guidance, the rest to the low-noise one; the switch is at the
// first step below the boundary.
TEST(EulerSampler, TwoExpertsSwitchAtTheBoundaryEachWithItsGuidance) {
  const auto noise = torch::ones({1, 1, 1, 2, 2});
  const int steps = 8;
  const double shift = 3.0, boundary = 0.875;
  const auto sigmas = sampling_sigmas(steps, shift);
  std::vector<char> who;  // 'H' or 'L' per model call, and the guidance seen
  VelocityField low = [&](const at::Tensor& x, const at::Tensor&, bool conditional) {
    who.push_back('L');
    return conditional ? torch::full_like(x, 1.0) : torch::zeros_like(x);
  };
  HighNoiseExpert high{[&](const at::Tensor& x, const at::Tensor&, bool conditional) {
                         who.push_back('H');
                         return conditional ? torch::full_like(x, 1.0) : torch::zeros_like(x);
                       },
                       2.0, boundary};
  const auto sample = sample_flow(noise, low, euler(steps, shift, 3.0), &high);
  // Derived: step i is the high expert's where 1000 * sigma_i >= 875; each
  // step calls its expert twice (cfg != 1) and moves by cfg * (sigma_{i+1} - sigma_i).
  std::string expected;
  double x = 1.0;
  int high_steps = 0;
  for (int i = 0; i < steps; ++i) {
    const bool is_high = 1000.0 * sigmas[i] >= 1000.0 * boundary;
    high_steps += is_high;
    expected += is_high ? "HH" : "LL";
    x += (is_high ? 2.0 : 3.0) * (sigmas[i + 1] - sigmas[i]);
  }
  EXPECT_GT(high_steps, 0);
  EXPECT_LT(high_steps, steps);
  EXPECT_EQ(std::string(who.begin(), who.end()), expected);
  EXPECT_NEAR(sample.mean().item<double>(), x, 1e-6);
}

// TI2V from a picture: frame 0 is the picture's latents throughout, and the
// model sees its tokens at t = 0 and the others at the step's t.
TEST(EulerSampler, AFirstFrameIsHeldAndItsTokensSeeTimestepZero) {
  torch::manual_seed(5);
  const auto x0 = torch::randn({1, 2, 3, 4, 4});
  const auto noise = torch::randn({1, 2, 3, 4, 4});
  auto options = euler(6, 3.0, 1.0);
  options.first_frame = x0.slice(2, 0, 1);
  bool seen_first_at_zero = true;
  VelocityField exact = [&](const at::Tensor& x, const at::Tensor& t, bool) {
    // [B, L]: 2x2 patches, so 4 tokens a frame
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 12}));
    seen_first_at_zero = seen_first_at_zero && t.slice(1, 0, 4).eq(0).all().item<bool>();
    EXPECT_TRUE(torch::equal(x.slice(2, 0, 1), x0.slice(2, 0, 1)));
    const auto sigma = t.slice(1, 4, 5).view({-1, 1, 1, 1, 1}) / 1000.0;
    return (x - x0) / sigma;  // the exact field of the later frames
  };
  const auto sample = sample_flow(noise, exact, options);
  EXPECT_TRUE(seen_first_at_zero);
  EXPECT_TRUE(torch::equal(sample.slice(2, 0, 1), x0.slice(2, 0, 1)));  // exactly the picture's latents
  EXPECT_TRUE(torch::allclose(sample, x0, 1e-4, 1e-4));
}

// Training with the first frame kept: x_t's frame 0 is x0's, its tokens'
// timesteps are 0, and the loss leaves it out; rows not kept are untouched.
TEST(FlowMatching, AKeptFirstFrameIsCleanAtTimestepZeroAndOutOfTheLoss) {
  torch::manual_seed(6);
  const auto x0 = torch::randn({2, 3, 3, 4, 4});
  const auto noisy = make_noisy_batch(x0, {4, 9}, 7, 2, {});
  const auto first = keep_first_frame(noisy, x0, {true, false}, {1, 2, 2});
  EXPECT_TRUE(torch::equal(first.x_t[0].slice(1, 0, 1), x0[0].slice(1, 0, 1)));
  EXPECT_TRUE(torch::equal(first.x_t[0].slice(1, 1), noisy.x_t[0].slice(1, 1)));
  EXPECT_TRUE(torch::equal(first.x_t[1], noisy.x_t[1]));
  ASSERT_EQ(first.timesteps.sizes(), (std::vector<int64_t>{2, 12}));
  EXPECT_TRUE(first.timesteps[0].slice(0, 0, 4).eq(0).all().item<bool>());
  EXPECT_TRUE(first.timesteps[0].slice(0, 4).eq(noisy.timesteps[0]).all().item<bool>());
  EXPECT_TRUE(first.timesteps[1].eq(noisy.timesteps[1]).all().item<bool>());
  // A prediction wrong only on the kept frame costs nothing; on row 1's frame 0 it does.
  auto prediction = noisy.target.clone();
  prediction[0].slice(1, 0, 1).add_(100.0);
  EXPECT_EQ(first_frame_loss(prediction, noisy.target, first.kept).item<double>(), 0.0);
  prediction = noisy.target.clone();
  prediction[1].slice(1, 0, 1).add_(3.0);
  // row 1: frame 0 of 3 off by 3 -> mean 9 / 3 = 3; row 0: 0; the mean of rows 1.5
  EXPECT_NEAR(first_frame_loss(prediction, noisy.target, first.kept).item<double>(), 1.5, 1e-5);
  // nothing kept: the plain loss
  const auto none = keep_first_frame(noisy, x0, {false, false}, {1, 2, 2});
  EXPECT_NEAR(first_frame_loss(prediction, noisy.target, none.kept).item<double>(),
              flow_matching_loss(prediction, noisy.target).item<double>(), 1e-6);
}
