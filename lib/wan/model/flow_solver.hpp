// The step rules of Wan's samplers behind one interface: each turns the
// guided velocity at x_i into x_{i+1}, on the schedule of timesteps and
// sigmas it defines.
//
//   euler   x_{i+1} = x_i + (sigma_{i+1} - sigma_i) * v_i on sigmas shifted
//           from linspace(1, 0, N+1); the model sees t = 1000 * sigma_i.
//   unipc   the release's default (Wan's FlowUniPCMultistepScheduler, from
//           diffusers' UniPC): order 2, B(h) = e^h - 1 ("bh2"), on the data
//           prediction x0 = x - sigma * v, with the UniC corrector, order 1
//           at the last step; sigmas shifted from linspace(0.999, 0, N+1).
//   dpm++   Wan's FlowDPMSolverMultistepScheduler: DPM-Solver++ order 2
//           (midpoint) on x0, order 1 at the first and last step; sigmas
//           shifted from linspace(1, 0, N+1).
// unipc and dpm++ give the model whole timesteps, int(1000 * sigma_i), as
// the official schedulers do, and step with their sigmas rounded to fp32.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wt::wan {

enum class Solver { Euler, UniPC, DpmPlusPlus };

// Whose sigmas the UniPC solver steps on. Release: Wan's own scheduler's
// (above). Diffusers: diffusers' UniPCMultistepScheduler with
// use_flow_sigmas, as WanPipeline and the Wan-AI *-Diffusers repositories
// run it: shifted from linspace(1, 1/1000, N+1)[:N], the first pulled to
// 1 - 1e-6 when it is within 1e-6 of 1. The two differ by up to a few
// timesteps (at 10 steps, shift 5: 921 against 920 at step 3), which a
// sample shows.
enum class Schedule { Release, Diffusers };
std::string schedule_name(Schedule schedule);
std::optional<Schedule> schedule_from_name(std::string_view name);

// "euler", "unipc", "dpm++": the names of wansample's --solver.
std::string solver_name(Solver solver);
std::optional<Solver> solver_from_name(std::string_view name);

class FlowSolver {
 public:
  virtual ~FlowSolver() = default;
  int steps() const { return static_cast<int>(timesteps_.size()); }
  // The timestep the model sees at step i (0..1000).
  double timestep(int i) const { return timesteps_.at(i); }
  // sigma_0 .. sigma_N; sigma_N = 0.
  const std::vector<double>& sigmas() const { return sigmas_; }
  // x_{i+1} from x_i and the guided velocity v_i (fp32), for i = 0, 1, ...
  // in order: the multistep solvers keep the earlier steps' predictions.
  virtual at::Tensor step(int i, const at::Tensor& x, const at::Tensor& velocity) = 0;

 protected:
  FlowSolver(std::vector<double> sigmas, std::vector<double> timesteps);
  std::vector<double> sigmas_, timesteps_;
};

// A fresh solver for `steps` steps (>= 1) with the timestep shift `shift`
// (Schedule::Diffusers: UniPC only; std::invalid_argument for the others).
std::unique_ptr<FlowSolver> make_flow_solver(Solver solver, int steps, double shift,
                                             Schedule schedule = Schedule::Release);

// The official schedulers' schedule: sigmas shifted from numpy's
// linspace(start, 0, N+1)[:N] in double, timesteps int(1000 * sigma)
// (truncated), sigmas rounded to fp32, then sigma_N = 0.
struct SolverSchedule {
  std::vector<double> sigmas, timesteps;
};
SolverSchedule release_schedule(double start, int steps, double shift);
// diffusers' flow UniPC schedule (Schedule::Diffusers), rounded alike.
SolverSchedule diffusers_schedule(int steps, double shift);

// log(alpha / sigma) with alpha = 1 - sigma: -inf at sigma 1, +inf at 0.
double half_log_snr(double sigma);

// The Euler sampler's N+1 sigmas, shift_sigma(1 - i/N), from 1 down to 0.
std::vector<double> sampling_sigmas(int steps, double shift);

}  // namespace wt::wan
