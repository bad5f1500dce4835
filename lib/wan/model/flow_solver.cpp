#include "wantrain/wan/model/flow_solver.hpp"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/model/dpm_solver.hpp"
#include "wantrain/wan/model/unipc_solver.hpp"

namespace wt::wan {

std::string solver_name(Solver solver) {
  switch (solver) {
    case Solver::Euler: return "euler";
    case Solver::UniPC: return "unipc";
    case Solver::DpmPlusPlus: return "dpm++";
  }
  return "?";
}

std::optional<Solver> solver_from_name(std::string_view name) {
  for (Solver s : {Solver::Euler, Solver::UniPC, Solver::DpmPlusPlus})
    if (name == solver_name(s)) return s;
  return std::nullopt;
}

std::string schedule_name(Schedule schedule) { return schedule == Schedule::Diffusers ? "diffusers" : "release"; }

std::optional<Schedule> schedule_from_name(std::string_view name) {
  for (Schedule s : {Schedule::Release, Schedule::Diffusers})
    if (name == schedule_name(s)) return s;
  return std::nullopt;
}

FlowSolver::FlowSolver(std::vector<double> sigmas, std::vector<double> timesteps)
    : sigmas_(std::move(sigmas)), timesteps_(std::move(timesteps)) {}

std::vector<double> sampling_sigmas(int steps, double shift) {
  std::vector<double> sigmas(steps + 1);
  for (int i = 0; i <= steps; ++i) sigmas[i] = shift_sigma(1.0 - double(i) / steps, shift);
  return sigmas;
}

SolverSchedule release_schedule(double start, int steps, double shift) {
  SolverSchedule schedule;
  const double delta = (0.0 - start) / steps;  // numpy: arange(num) * step + start
  for (int i = 0; i < steps; ++i) {
    const double sigma = shift_sigma(double(i) * delta + start, shift);
    schedule.timesteps.push_back(std::trunc(sigma * 1000.0));
    schedule.sigmas.push_back(static_cast<float>(sigma));
  }
  schedule.sigmas.push_back(0.0);
  return schedule;
}

SolverSchedule diffusers_schedule(int steps, double shift) {
  SolverSchedule schedule;
  const double start = 1.0, delta = (1.0 / 1000.0 - start) / steps;  // numpy: linspace(1, 1/1000, N+1)
  for (int i = 0; i < steps; ++i) {
    double sigma = shift_sigma(double(i) * delta + start, shift);
    if (i == 0 && std::fabs(sigma - 1.0) < 1e-6) sigma -= 1e-6;  // diffusers keeps log(alpha) finite so
    schedule.timesteps.push_back(std::trunc(sigma * 1000.0));
    schedule.sigmas.push_back(static_cast<float>(sigma));
  }
  schedule.sigmas.push_back(0.0);
  return schedule;
}

double half_log_snr(double sigma) { return std::log(1.0 - sigma) - std::log(sigma); }

namespace {

class EulerSolver final : public FlowSolver {
 public:
  EulerSolver(int steps, double shift) : FlowSolver(sampling_sigmas(steps, shift), {}) {
    for (int i = 0; i < steps; ++i) timesteps_.push_back(1000.0 * sigmas_[i]);
  }
  at::Tensor step(int i, const at::Tensor& x, const at::Tensor& velocity) override {
    return x + (sigmas_[i + 1] - sigmas_[i]) * velocity;
  }
};

}  // namespace

std::unique_ptr<FlowSolver> make_flow_solver(Solver solver, int steps, double shift, Schedule schedule) {
  if (steps < 1) throw std::invalid_argument("a sampler needs at least one step, not " + std::to_string(steps));
  if (schedule == Schedule::Diffusers && solver != Solver::UniPC)
    throw std::invalid_argument("diffusers' schedule is UniPC's (WanPipeline's scheduler), not " + solver_name(solver) +
                                "'s");
  switch (solver) {
    case Solver::Euler: return std::make_unique<EulerSolver>(steps, shift);
    case Solver::UniPC:
      return std::make_unique<UniPCSolver>(schedule == Schedule::Diffusers ? diffusers_schedule(steps, shift)
                                                                           : UniPCSolver::release(steps, shift));
    case Solver::DpmPlusPlus: return std::make_unique<DpmSolver>(steps, shift);
  }
  throw std::invalid_argument("unknown solver");
}

}  // namespace wt::wan
