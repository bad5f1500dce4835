#include "wantrain/wan/objective/phased_consistency.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "wantrain/data/sampler.hpp"
#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/model/flow_solver.hpp"

namespace wt::wan {
namespace {

// Keys the grid points apart from the noise of the same (seed, step, sample).
constexpr uint64_t kPointSalt = 0x7068617365645f63;  // "phased_c"

}  // namespace

at::Tensor per_row(const at::Tensor& value, const at::Tensor& x) {
  std::vector<int64_t> shape(size_t(x.dim()), 1);
  shape[0] = value.size(0);
  return value.to(x.device(), torch::kFloat32).view(shape);
}

int FewStepSchedule::edge_index(int n) const {
  const int m = teacher_steps / steps;
  return (n + 1 + m - 1) / m * m;
}

std::vector<double> FewStepSchedule::student_sigmas() const {
  std::vector<double> edges;
  for (int i = 0; i <= teacher_steps; i += teacher_steps / steps) edges.push_back(grid[size_t(i)]);
  return edges;
}

FewStepSchedule few_step_schedule(int steps, int teacher_steps, double shift) {
  if (steps < 1 || teacher_steps < steps || teacher_steps % steps != 0)
    throw std::invalid_argument(
        fmt::format("{} teacher steps are no whole number of phases of {} student steps", teacher_steps, steps));
  if (!(shift > 0)) throw std::invalid_argument("the shift must be positive");
  FewStepSchedule schedule;
  schedule.steps = steps;
  schedule.teacher_steps = teacher_steps;
  schedule.shift = shift;
  schedule.grid = sampling_sigmas(teacher_steps, shift);
  return schedule;
}

std::vector<int> consistency_points(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step,
                                    const FewStepSchedule& schedule) {
  std::vector<int> points;
  for (const int64_t index : sample_indices) {
    data::PortableRandom r(sample_key(seed ^ kPointSalt, step, index));
    points.push_back(static_cast<int>(r.below(uint64_t(schedule.teacher_steps))));
  }
  return points;
}

ConsistencySigmas consistency_sigmas(const FewStepSchedule& schedule, const std::vector<int>& points,
                                     const at::Device& device) {
  const auto b = int64_t(points.size());
  auto t = torch::empty({b}, torch::kFloat32), next = torch::empty({b}, torch::kFloat32),
       edge = torch::empty({b}, torch::kFloat32);
  for (int64_t i = 0; i < b; ++i) {
    const int n = points[size_t(i)];
    TORCH_CHECK(n >= 0 && n < schedule.teacher_steps, "a grid point outside the teacher's steps");
    t[i] = schedule.grid[size_t(n)];
    next[i] = schedule.grid[size_t(n) + 1];
    edge[i] = schedule.grid[size_t(schedule.edge_index(n))];
  }
  return {t.to(device), next.to(device), edge.to(device)};
}

at::Tensor noised_at(const at::Tensor& x0, const at::Tensor& eps, const at::Tensor& t) {
  const auto s = per_row(t, x0);
  return (1 - s) * x0 + s * eps;
}

at::Tensor consistency_target(const at::Tensor& x_t, const ConsistencySigmas& sigmas,
                              const SigmaVelocity& guided_teacher, const SigmaVelocity& target) {
  torch::NoGradGuard no_grad;
  const auto x = x_t.to(torch::kFloat32);
  const auto t = per_row(sigmas.t, x), next = per_row(sigmas.next, x), edge = per_row(sigmas.edge, x);
  // (x_s - x_t) / (s - t) from the two steps' displacements, not from x_s
  // and x_t themselves: near an edge s - t is small, and the difference of
  // the two points would lose the digits the velocities keep.
  const auto to_next = (next - t) * guided_teacher(x_t, sigmas.t).to(torch::kFloat32);
  const auto x_next = x + to_next;
  // Rows whose step ends on the edge add 0 times the target's velocity.
  const auto to_edge = (edge - next) * target(x_next, sigmas.next).to(torch::kFloat32);
  return (to_next + to_edge) / (edge - t);
}

}  // namespace wt::wan
