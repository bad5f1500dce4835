// Few-step distillation's loss (wan/objective/phased_consistency.hpp)
// against a reference written here from the method's equations, in plain
// doubles, on hand-built velocity fields: the loss, its gradient (through
// the student only, never through its stop-gradient target), the schedule
// and the keyed draws.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/objective/phased_consistency.hpp"
#include "wantrain/wan/model/flow_solver.hpp"

namespace wt::wan {
namespace {

// The fields: teacher v_c = a_c x (1 + s) + b, v_u = a_u x - s; student
// v = w x + u s with trainable scalars w, u.
constexpr double kAc = 0.7, kAu = -0.4, kGuidance = 3.0;
const std::vector<double> kB = {0.3, -0.2, 0.5, 0.1};

struct Reference {
  double loss = 0, grad_w = 0, grad_u = 0;
};

// Euler's shifted grid, written out: sigma_i = shift (1 - i/N) / (1 + (shift - 1)(1 - i/N)).
double grid_sigma(int i, int n, double shift) {
  const double s = 1.0 - double(i) / n;
  return shift * s / (1.0 + (shift - 1.0) * s);
}

Reference reference(const std::vector<std::vector<double>>& x0, const std::vector<std::vector<double>>& eps,
                    const std::vector<int>& points, int steps, int teacher_steps, double shift, double w, double u) {
  const int m = teacher_steps / steps;
  Reference r;
  double count = 0;
  for (size_t row = 0; row < x0.size(); ++row) {
    const int n = points[row];
    int edge = n + 1;
    while (edge % m != 0) ++edge;  // the first phase edge at or after n + 1
    const double t = grid_sigma(n, teacher_steps, shift), t1 = grid_sigma(n + 1, teacher_steps, shift),
                 s = grid_sigma(edge, teacher_steps, shift);
    for (size_t k = 0; k < x0[row].size(); ++k) {
      const double xt = (1 - t) * x0[row][k] + t * eps[row][k];
      const double vc = kAc * xt * (1 + t) + kB[k], vu = kAu * xt - t;
      const double vg = vu + kGuidance * (vc - vu);
      const double x1 = xt + (t1 - t) * vg;
      const double xs = x1 + (s - t1) * (w * x1 + u * t1);
      const double wanted = (xs - xt) / (s - t);
      const double diff = (w * xt + u * t) - wanted;
      r.loss += diff * diff;
      r.grad_w += 2 * diff * xt;
      r.grad_u += 2 * diff * t;
      count += 1;
    }
  }
  r.loss /= count;
  r.grad_w /= count;
  r.grad_u /= count;
  return r;
}

at::Tensor as_tensor(const std::vector<std::vector<double>>& rows) {
  auto out = torch::empty({int64_t(rows.size()), int64_t(rows[0].size())}, torch::kFloat64);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t k = 0; k < rows[i].size(); ++k) out[int64_t(i)][int64_t(k)] = rows[i][k];
  return out.to(torch::kFloat32);
}

// The sigma [B] as a column over x [B, D].
at::Tensor column(const at::Tensor& sigma) { return sigma.unsqueeze(1); }

TEST(PhasedConsistency, LossAndGradientAreTheReferencesOnHandBuiltFields) {
  const std::vector<std::vector<double>> x0 = {
      {0.5, -1.0, 0.25, 2.0}, {-0.3, 0.8, 1.1, -0.6}, {1.5, 0.2, -0.9, 0.4}, {0.0, -0.7, 0.6, 1.3}};
  const std::vector<std::vector<double>> eps = {
      {1.2, 0.3, -0.8, 0.1}, {-1.4, 0.6, 0.2, 0.9}, {0.05, -0.5, 1.7, -1.1}, {0.8, 0.8, -0.2, -0.4}};
  const int steps = 4, teacher_steps = 12;
  const double shift = 3.0;
  // Grid points: inside a phase (0, 4), on the last step of one (5: 6 is an
  // edge), and the very last step (11, to sigma 0).
  const std::vector<int> points = {0, 4, 5, 11};
  const auto schedule = few_step_schedule(steps, teacher_steps, shift);
  const auto sigmas = consistency_sigmas(schedule, points, torch::kCPU);
  auto w = torch::tensor(0.9, torch::requires_grad()), u = torch::tensor(-0.35, torch::requires_grad());
  const auto b = torch::tensor(std::vector<float>(kB.begin(), kB.end())).unsqueeze(0);
  const SigmaVelocity teacher = [&](const at::Tensor& x, const at::Tensor& s) {
    const auto vc = kAc * x * (1 + column(s)) + b;
    const auto vu = kAu * x - column(s);
    return vu + kGuidance * (vc - vu);
  };
  const SigmaVelocity student = [&](const at::Tensor& x, const at::Tensor& s) { return w * x + u * column(s); };

  const auto x_t = noised_at(as_tensor(x0), as_tensor(eps), sigmas.t);
  const auto wanted = consistency_target(x_t, sigmas, teacher, student);
  EXPECT_FALSE(wanted.requires_grad());
  const auto loss = per_sample_loss(student(x_t, sigmas.t), wanted).mean();
  loss.backward();

  const auto want = reference(x0, eps, points, steps, teacher_steps, shift, 0.9, -0.35);
  EXPECT_NEAR(loss.item<double>(), want.loss, 1e-5 * std::max(1.0, want.loss));
  EXPECT_NEAR(w.grad().item<double>(), want.grad_w, 1e-5 * std::max(1.0, std::abs(want.grad_w)));
  EXPECT_NEAR(u.grad().item<double>(), want.grad_u, 1e-5 * std::max(1.0, std::abs(want.grad_u)));
  // The gradient is the student's at x_t alone: through the target it
  // would be another number.
  EXPECT_GT(want.loss, 1e-3);
}

TEST(PhasedConsistency, WithOneTeacherStepAPhaseTheTargetIsTheGuidedTeachersVelocity) {
  const auto schedule = few_step_schedule(3, 3, 5.0);
  const auto sigmas = consistency_sigmas(schedule, {0, 1, 2}, torch::kCPU);
  const auto x0 = torch::randn({3, 2, 4}), eps = torch::randn({3, 2, 4});
  const auto x_t = noised_at(x0, eps, sigmas.t);
  const SigmaVelocity teacher = [](const at::Tensor& x, const at::Tensor& s) { return 0.5 * x - s.view({-1, 1, 1}); };
  const SigmaVelocity target = [&](const at::Tensor& x, const at::Tensor&) {
    return torch::full_like(x, 1e3);  // multiplied by s - t' = 0 on every row
  };
  const auto wanted = consistency_target(x_t, sigmas, teacher, target);
  EXPECT_TRUE(torch::allclose(wanted, teacher(x_t, sigmas.t), 1e-6, 1e-7))
      << (wanted - teacher(x_t, sigmas.t)).abs().max().item<double>();
}

TEST(PhasedConsistency, ThePhaseEdgesAreEulersGridOfTheStudentsSteps) {
  for (const auto& [k, n, shift] : {std::tuple{4, 48, 5.0}, {2, 10, 20.0}, {1, 7, 3.0}, {5, 5, 1.0}}) {
    const auto schedule = few_step_schedule(k, n, shift);
    EXPECT_EQ(schedule.student_sigmas(), sampling_sigmas(k, shift)) << k << " of " << n;
    ASSERT_EQ(schedule.grid.size(), size_t(n + 1));
    for (int i = 0; i < n; ++i) {
      const int edge = schedule.edge_index(i);
      EXPECT_EQ(edge % (n / k), 0);
      EXPECT_GT(edge, i);
      EXPECT_LE(edge - i, n / k);
    }
  }
  EXPECT_THROW(few_step_schedule(4, 10, 5.0), std::invalid_argument);
  EXPECT_THROW(few_step_schedule(0, 10, 5.0), std::invalid_argument);
  EXPECT_THROW(few_step_schedule(4, 2, 5.0), std::invalid_argument);
  EXPECT_THROW(few_step_schedule(2, 4, 0.0), std::invalid_argument);
}

TEST(PhasedConsistency, EachSamplesPointDependsOnItsIndexAndStepAlone) {
  const auto schedule = few_step_schedule(4, 48, 5.0);
  const auto together = consistency_points({3, 17, 40, 5}, 11, 7, schedule);
  const auto apart = consistency_points({40, 3}, 11, 7, schedule);
  EXPECT_EQ(together[2], apart[0]);
  EXPECT_EQ(together[0], apart[1]);
  // Every grid point is drawn, and none outside [0, N).
  std::vector<int> seen(48, 0);
  std::vector<int64_t> many(4800);
  for (size_t i = 0; i < many.size(); ++i) many[i] = int64_t(i);
  for (const int n : consistency_points(many, 11, 7, schedule)) {
    ASSERT_TRUE(n >= 0 && n < 48);
    ++seen[size_t(n)];
  }
  for (const int count : seen) EXPECT_GT(count, 50);  // 100 expected each
  EXPECT_NE(consistency_points(many, 11, 8, schedule), consistency_points(many, 11, 7, schedule));
}

}  // namespace
}  // namespace wt::wan
