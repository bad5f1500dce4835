// Few-step distillation by distribution matching
// (wan/objective/distribution_matching.hpp) against a reference written
// here from the method's equations (DMD's eqs. 2, 7, 8 and 9, DMD2's
// backward simulation), in plain doubles, on hand-built velocity fields:
// the summed loss, its gradient in the student's and in the fake score's
// parameters (each only through its own loss), and the keyed draws.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "wantrain/wan/objective/distribution_matching.hpp"
#include "wantrain/wan/model/flow_matching.hpp"

namespace wt::wan::matching_test {
namespace {

// The fields, x and sigma to a velocity: teacher v_c = a_c x (1 + s) + b_k,
// v_u = a_u x - s, guided by G; student v = w x + u s; fake score v = p x + q s.
constexpr double kAc = 0.7, kAu = -0.4, kGuidance = 2.5, kRegression = 0.3;
const std::vector<double> kB = {0.3, -0.2, 0.5, 0.1};
using Rows = std::vector<std::vector<double>>;

double guided(double x, double s, size_t k) {
  const double vc = kAc * x * (1 + s) + kB[k], vu = kAu * x - s;
  return vu + kGuidance * (vc - vu);
}

struct Reference {
  double loss = 0, grad_w = 0, grad_u = 0, grad_p = 0, grad_q = 0;
};

// Row i: student steps k[i] down `edges` from eps[i] without gradient,
// then x̂ = x_k - sigma_k v; the matching point t[i] with noise n[i]; the
// fake score's point tf[i] with noise nf[i]; the teacher's Euler sample
// down `grid` from eps[i].
Reference reference(const Rows& eps, const std::vector<int>& k, const std::vector<double>& edges,
                    const std::vector<double>& t, const Rows& n, const std::vector<double>& tf, const Rows& nf,
                    const std::vector<double>& grid, double w, double u, double p, double q) {
  Reference r;
  const double rows = double(eps.size()), d = double(eps[0].size());
  for (size_t i = 0; i < eps.size(); ++i) {
    std::vector<double> x = eps[i], hat(x.size()), real(x.size()), fake(x.size());
    for (int j = 0; j < k[i]; ++j)
      for (double& e : x) e += (edges[size_t(j) + 1] - edges[size_t(j)]) * (w * e + u * edges[size_t(j)]);
    const double sk = edges[size_t(k[i])];
    double normaliser = 0;
    for (size_t c = 0; c < x.size(); ++c) {
      hat[c] = x[c] - sk * (w * x[c] + u * sk);
      const double xt = (1 - t[i]) * hat[c] + t[i] * n[i][c];
      real[c] = xt - t[i] * guided(xt, t[i], c);
      fake[c] = xt - t[i] * (p * xt + q * t[i]);
      normaliser += std::abs(hat[c] - real[c]) / d;
    }
    // The teacher's own sample from the same noise.
    std::vector<double> y = eps[i];
    for (size_t j = 0; j + 1 < grid.size(); ++j)
      for (size_t c = 0; c < y.size(); ++c) y[c] += (grid[j + 1] - grid[j]) * guided(y[c], grid[j], c);
    for (size_t c = 0; c < x.size(); ++c) {
      // d x̂ / d(w, u): the steps before x_k carry no gradient.
      const double dhat_dw = -sk * x[c], dhat_du = -sk * sk;
      const double g = (fake[c] - real[c]) / normaliser;
      // 1/2 (x̂ - sg(x̂ - g))^2 = g^2 / 2, whose gradient in x̂ is g.
      r.loss += 0.5 * g * g / d / rows;
      double dloss_dhat = g / d / rows;
      // The regression on the teacher's sample.
      r.loss += kRegression * (hat[c] - y[c]) * (hat[c] - y[c]) / d / rows;
      dloss_dhat += kRegression * 2 * (hat[c] - y[c]) / d / rows;
      r.grad_w += dloss_dhat * dhat_dw;
      r.grad_u += dloss_dhat * dhat_du;
      // The fake score's flow matching on sg(x̂).
      const double xf = (1 - tf[i]) * hat[c] + tf[i] * nf[i][c];
      const double diff = p * xf + q * tf[i] - (nf[i][c] - hat[c]);
      r.loss += diff * diff / d / rows;
      r.grad_p += 2 * diff * xf / d / rows;
      r.grad_q += 2 * diff * tf[i] / d / rows;
    }
  }
  return r;
}

at::Tensor as_tensor(const Rows& rows) {
  auto out = torch::empty({int64_t(rows.size()), int64_t(rows[0].size())}, torch::kFloat64);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t c = 0; c < rows[i].size(); ++c) out[int64_t(i)][int64_t(c)] = rows[i][c];
  return out.to(torch::kFloat32);
}

at::Tensor as_tensor(const std::vector<double>& values) {
  return torch::tensor(std::vector<float>(values.begin(), values.end()));
}

TEST(DistributionMatching, LossAndGradientsAreTheReferencesOnHandBuiltFields) {
  const Rows eps = {{1.2, 0.3, -0.8, 0.1}, {-1.4, 0.6, 0.2, 0.9}, {0.05, -0.5, 1.7, -1.1}};
  const Rows n = {{0.4, -1.1, 0.7, 0.2}, {0.9, 0.1, -0.3, -1.2}, {-0.6, 1.3, 0.5, 0.8}};
  const Rows nf = {{-0.2, 0.5, 1.0, -0.9}, {0.3, -0.7, 0.4, 1.1}, {1.5, 0.2, -1.0, 0.6}};
  // Three student steps at shift 3; the rows stop after 0, 1 and 2 of them.
  const std::vector<int> k = {0, 1, 2};
  const std::vector<double> edges = {1.0, 3.0 * (2.0 / 3) / (1 + 2.0 * (2.0 / 3)), 3.0 * (1.0 / 3) / (1 + 2.0 / 3),
                                     0.0};
  const std::vector<double> t = {0.9, 0.55, 0.2}, tf = {0.35, 0.8, 0.6};
  const std::vector<double> grid = {1.0, 0.75, 0.4, 0.0};
  const double w0 = 0.9, u0 = -0.35, p0 = 0.6, q0 = 0.25;
  auto w = torch::tensor(w0, torch::requires_grad()), u = torch::tensor(u0, torch::requires_grad());
  auto p = torch::tensor(p0, torch::requires_grad()), q = torch::tensor(q0, torch::requires_grad());
  const auto b = as_tensor(kB).unsqueeze(0);
  const auto column = [](const at::Tensor& s) { return s.unsqueeze(1); };
  const SigmaVelocity teacher = [&](const at::Tensor& x, const at::Tensor& s) {
    const auto vc = kAc * x * (1 + column(s)) + b;
    const auto vu = kAu * x - column(s);
    return vu + kGuidance * (vc - vu);
  };
  const SigmaVelocity student = [&](const at::Tensor& x, const at::Tensor& s) { return w * x + u * column(s); };
  const SigmaVelocity fake = [&](const at::Tensor& x, const at::Tensor& s) { return p * x + q * column(s); };
  const SigmaVelocity fake_without_gradient = [&](const at::Tensor& x, const at::Tensor& s) {
    torch::NoGradGuard no_grad;
    return fake(x, s);
  };

  const auto generated = generator_sample(as_tensor(eps), k, edges, student, student);
  const auto sample = generated.detach();
  const auto sigma = as_tensor(t), sigma_f = as_tensor(tf);
  const auto direction =
      matching_direction(sample, noised_at(sample, as_tensor(n), sigma), sigma, teacher, fake_without_gradient);
  EXPECT_FALSE(direction.requires_grad());
  const auto eps_f = as_tensor(nf);
  const auto fake_losses = per_sample_loss(fake(noised_at(sample, eps_f, sigma_f), sigma_f), eps_f - sample);
  const auto regression = per_sample_loss(generated, teacher_sample(as_tensor(eps), grid, teacher));
  const auto loss = (generator_losses(generated, direction) + fake_losses + kRegression * regression).mean();
  loss.backward();

  const auto want = reference(eps, k, edges, t, n, tf, nf, grid, w0, u0, p0, q0);
  const auto near = [](const at::Tensor& got, double expected) {
    EXPECT_NEAR(got.item<double>(), expected, 1e-5 * std::max(1.0, std::abs(expected)));
  };
  near(loss, want.loss);
  near(w.grad(), want.grad_w);
  near(u.grad(), want.grad_u);
  near(p.grad(), want.grad_p);
  near(q.grad(), want.grad_q);
  // Numbers that a wrong sign or weighting would change.
  EXPECT_GT(std::abs(want.grad_w), 1e-2);
  EXPECT_GT(std::abs(want.grad_u), 1e-2);
}

TEST(DistributionMatching, AFakeScoreEqualToTheTeacherMovesNothing) {
  // When the student's samples are where the teacher puts them (the fake
  // score is the guided teacher), the direction is 0 and so is the
  // generator's gradient.
  const auto x = torch::randn({2, 3, 4});
  const SigmaVelocity teacher = [](const at::Tensor& v, const at::Tensor& s) { return 0.5 * v - s.view({-1, 1, 1}); };
  const auto sigma = torch::tensor({0.3f, 0.8f});
  const auto direction = matching_direction(x, noised_at(x, torch::randn_like(x), sigma), sigma, teacher, teacher);
  EXPECT_EQ(direction.abs().max().item<double>(), 0.0);
  auto generated = x.clone().requires_grad_(true);
  generator_losses(generated, direction).sum().backward();
  EXPECT_EQ(generated.grad().abs().max().item<double>(), 0.0);
}

TEST(DistributionMatching, AKeptFirstFrameIsOutOfTheNormaliser) {
  // [B, C, F, H, W] with frame 0 held: the normaliser averages the moving
  // frames only, so the direction there is (fake - real) / their mean distance.
  const auto generated = torch::zeros({1, 1, 2, 1, 2});
  const auto sigma = torch::tensor({0.5f});
  const SigmaVelocity real = [](const at::Tensor& v, const at::Tensor&) { return torch::zeros_like(v); };
  const SigmaVelocity fake = [](const at::Tensor& v, const at::Tensor&) { return torch::full_like(v, -2.0); };
  auto noised = torch::zeros({1, 1, 2, 1, 2});
  noised.select(2, 1).fill_(3.0);  // real estimate: 3 on frame 1, 0 on frame 0
  auto moving = torch::ones({1, 1, 2, 1, 1});
  moving.select(2, 0).fill_(0.0);
  const auto held = matching_direction(generated, noised, sigma, real, fake, moving);
  // fake - real = -t (-2) = 1 everywhere; |x̂ - real| is 3 on frame 1, 0 on frame 0.
  EXPECT_NEAR(held.select(2, 1).mean().item<double>(), 1.0 / 3.0, 1e-6);
  const auto all = matching_direction(generated, noised, sigma, real, fake);
  EXPECT_NEAR(all.select(2, 1).mean().item<double>(), 1.0 / 1.5, 1e-6);
}

TEST(DistributionMatching, EachSamplesDrawsDependOnItsIndexAndStepAlone) {
  const auto together = matching_draws({3, 17, 40, 5}, 11, 7, 4, 5.0);
  const auto apart = matching_draws({40, 3}, 11, 7, 4, 5.0);
  EXPECT_EQ(together.generator_steps[2], apart.generator_steps[0]);
  EXPECT_EQ(together.matching_sigmas[0], apart.matching_sigmas[1]);
  EXPECT_EQ(together.fake_sigmas[2], apart.fake_sigmas[0]);
  EXPECT_EQ(together.matching_noise_keys[0], apart.matching_noise_keys[1]);
  std::vector<int64_t> many(4000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = int64_t(i);
  const auto draws = matching_draws(many, 11, 7, 4, 5.0);
  std::vector<int> seen(4, 0);
  for (size_t i = 0; i < many.size(); ++i) {
    const int k = draws.generator_steps[i];
    ASSERT_TRUE(k >= 0 && k < 4);
    ++seen[size_t(k)];
    // DMD's range [0.02, 0.98] of the schedule, through the shift.
    EXPECT_GE(draws.matching_sigmas[i], shift_sigma(0.02, 5.0));
    EXPECT_LE(draws.matching_sigmas[i], shift_sigma(0.98, 5.0));
    EXPECT_TRUE(draws.fake_sigmas[i] >= 0 && draws.fake_sigmas[i] <= 1);
    EXPECT_NE(draws.matching_noise_keys[i], draws.fake_noise_keys[i]);
  }
  for (const int count : seen) EXPECT_GT(count, 800);  // 1000 expected each
  EXPECT_NE(matching_draws(many, 11, 8, 4, 5.0).generator_steps, draws.generator_steps);
}

// The rollout at full depth (as every rank takes it under ZeRO-3) calls the
// student K - 1 times whatever the rows' k, and gives the same sample: rows
// past their own k stay where they are.
TEST(DistributionMatching, AFullDepthRolloutCallsTheStudentAlikeAndGivesTheSameSample) {
  const std::vector<double> edges = {1.0, 0.8, 0.5, 0.2, 0.0};  // K = 4
  const auto start = torch::tensor({{1.2, 0.3}, {-1.4, 0.6}}, torch::kFloat32);
  const std::vector<int> shallow = {0, 1};  // the deepest row takes 1 step of 3 possible
  int calls = 0;
  const SigmaVelocity student = [&](const at::Tensor& x, const at::Tensor& s) {
    ++calls;
    return 0.7 * x - 0.4 * s.unsqueeze(1);
  };
  const auto batch_depth = generator_sample(start, shallow, edges, student, student);
  EXPECT_EQ(calls, 1 + 1);  // one step without gradient, then the one with
  calls = 0;
  const auto full_depth = generator_sample(start, shallow, edges, student, student, /*full_depth=*/true);
  EXPECT_EQ(calls, 3 + 1);
  EXPECT_TRUE(torch::equal(full_depth, batch_depth));
}

}  // namespace
}  // namespace wt::wan::matching_test
