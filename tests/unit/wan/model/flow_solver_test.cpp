// The solvers of wansample --solver against an independent reference of the
// official schedulers (Wan's FlowUniPCMultistepScheduler and
// FlowDPMSolverMultistepScheduler, as wan/text2video.py sets them up), written
// here from their semantics: a step-by-step state machine in double precision
// that builds UniPC's R rho = b systems for any order and solves them with
// LibTorch, where the library keeps fp32 tensors and its own solver.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/sample/sampler.hpp"
#include "wantrain/wan/sample/student_sampler.hpp"
#include "wantrain/util/error.hpp"

using namespace wt::wan;

namespace {

double lambda_of(double sigma) { return std::log(1.0 - sigma) - std::log(sigma); }

// numpy.linspace(start, 0, n + 1)[:n] shifted, as set_timesteps computes:
// timesteps int64(1000 sigma), sigmas in fp32 with a final 0.
void official_schedule(double start, int n, double shift, std::vector<double>& sigmas, std::vector<double>& timesteps) {
  const double step = -start / n;
  for (int i = 0; i < n; ++i) {
    const double s = shift * (i * step + start) / (1.0 + (shift - 1.0) * (i * step + start));
    timesteps.push_back(static_cast<double>(static_cast<int64_t>(s * 1000.0)));
    sigmas.push_back(static_cast<float>(s));
  }
  sigmas.push_back(0.0);
}

struct ReferenceUniPC {
  int order = 2, n;
  std::vector<double> sigmas, timesteps;
  std::vector<at::Tensor> outputs;  // model_outputs: the newest last
  at::Tensor last_sample;
  int lower_order_nums = 0, this_order = 0, index = 0;

  ReferenceUniPC(int steps, double shift, int solver_order = 2) : order(solver_order), n(steps) {
    official_schedule(static_cast<float>(1.0 - 1.0 / 1000), steps, shift, sigmas, timesteps);
    outputs.resize(order);
  }

  // The shared B(h) update: from x at sigma index s0 to t, with the
  // prediction history ending at position `newest_at` of `history`.
  at::Tensor bh_update(const at::Tensor& x, int s0, int t, int p, const std::vector<at::Tensor>& history,
                       const at::Tensor* model_t) {
    const double sigma_t = sigmas[t], sigma_s0 = sigmas[s0], alpha_t = 1 - sigma_t;
    const double h = lambda_of(sigma_t) - lambda_of(sigma_s0);
    const at::Tensor& m0 = history.back();
    std::vector<double> rks;
    std::vector<at::Tensor> d1s;
    for (int k = 1; k < p; ++k) {
      const double rk = (lambda_of(sigmas[s0 - k]) - lambda_of(sigma_s0)) / h;
      rks.push_back(rk);
      d1s.push_back((history[history.size() - 1 - k] - m0) / rk);
    }
    rks.push_back(1.0);
    const double hh = -h, h_phi_1 = std::expm1(hh), b_h = std::expm1(hh);
    double h_phi_k = h_phi_1 / hh - 1, factorial = 1;
    auto R = torch::zeros({p, p}, torch::kDouble), b = torch::zeros({p}, torch::kDouble);
    for (int i = 1; i <= p; ++i) {
      for (int k = 0; k < p; ++k) R[i - 1][k] = std::pow(rks[k], i - 1);
      b[i - 1] = h_phi_k * factorial / b_h;
      factorial *= i + 1;
      h_phi_k = h_phi_k / hh - 1 / factorial;
    }
    auto x_t = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0;
    if (!model_t) {  // UniP
      if (!d1s.empty()) {
        const auto rhos = p == 2 ? torch::tensor({0.5}, torch::kDouble)
                                 : torch::linalg_solve(R.slice(0, 0, p - 1).slice(1, 0, p - 1), b.slice(0, 0, p - 1));
        auto res = torch::zeros_like(x);
        for (size_t k = 0; k < d1s.size(); ++k) res = res + rhos[k].item<double>() * d1s[k];
        x_t = x_t - alpha_t * b_h * res;
      }
      return x_t;
    }
    // UniC
    const auto rhos = p == 1 ? torch::tensor({0.5}, torch::kDouble) : torch::linalg_solve(R, b);
    auto res = torch::zeros_like(x);
    for (size_t k = 0; k < d1s.size(); ++k) res = res + rhos[k].item<double>() * d1s[k];
    return x_t - alpha_t * b_h * (res + rhos[p - 1].item<double>() * (*model_t - m0));
  }

  at::Tensor step(const at::Tensor& v, const at::Tensor& sample_in) {
    auto sample = sample_in;
    const auto m = sample - sigmas[index] * v;  // convert_model_output: x0 = x - sigma * v
    if (index > 0 && last_sample.defined()) {
      std::vector<at::Tensor> history;
      for (auto& o : outputs)
        if (o.defined()) history.push_back(o);
      sample = bh_update(last_sample, index - 1, index, this_order, history, &m);
    }
    for (int i = 0; i + 1 < order; ++i) outputs[i] = outputs[i + 1];
    outputs[order - 1] = m;
    this_order = std::min(std::min(order, n - index), lower_order_nums + 1);  // lower_order_final, warm-up
    last_sample = sample;
    std::vector<at::Tensor> history;
    for (auto& o : outputs)
      if (o.defined()) history.push_back(o);
    const auto next = bh_update(sample, index, index + 1, this_order, history, nullptr);
    if (lower_order_nums < order) ++lower_order_nums;
    ++index;
    return next;
  }
};

struct ReferenceDpm {
  int n;
  std::vector<double> sigmas, timesteps;
  at::Tensor m_prev;
  int lower_order_nums = 0, index = 0;

  ReferenceDpm(int steps, double shift) : n(steps) { official_schedule(1.0, steps, shift, sigmas, timesteps); }

  at::Tensor step(const at::Tensor& v, const at::Tensor& sample) {
    const int i = index++;
    const auto m0 = sample - sigmas[i] * v;
    const double sigma_t = sigmas[i + 1], sigma_s0 = sigmas[i], alpha_t = 1 - sigma_t;
    const double h = lambda_of(sigma_t) - lambda_of(sigma_s0);
    const bool lower_order_final = i == n - 1;  // final_sigmas_type "zero"
    at::Tensor x_t;
    if (lower_order_nums < 1 || lower_order_final) {
      x_t = sigma_t / sigma_s0 * sample - alpha_t * (std::exp(-h) - 1.0) * m0;
    } else {
      const double h_0 = lambda_of(sigma_s0) - lambda_of(sigmas[i - 1]), r0 = h_0 / h;
      const auto d1 = (1.0 / r0) * (m0 - m_prev);
      x_t = sigma_t / sigma_s0 * sample - alpha_t * (std::exp(-h) - 1.0) * m0 -
            0.5 * (alpha_t * (std::exp(-h) - 1.0)) * d1;
    }
    m_prev = m0;
    lower_order_nums = std::min(lower_order_nums + 1, 2);
    return x_t;
  }
};

// A guided field with some curvature: tanh of a mix of the last axis,
// scaled by the timestep, plus a branch-dependent linear part.
struct Field {
  at::Tensor mix = torch::randn({8, 8}, torch::kDouble) * 0.7;
  at::Tensor offset = torch::randn({1, 2, 3, 4, 8}, torch::kDouble) * 0.3;
  at::Tensor operator()(const at::Tensor& x, double t, bool conditional) const {
    const auto mixed = torch::tanh(torch::matmul(x, mix.to(x.scalar_type()))) * (0.5 + t / 1000.0);
    return conditional ? mixed + 0.3 * x + offset.to(x.scalar_type()) : 0.6 * mixed - 0.2 * x;
  }
};

template <class Reference>
at::Tensor reference_sample(Reference& ref, const Field& field, const at::Tensor& noise, double cfg) {
  auto x = noise.to(torch::kDouble);
  for (int i = 0; i < ref.n; ++i) {
    const double t = ref.timesteps[i];
    const auto cond = field(x, t, true), uncond = field(x, t, false);
    x = ref.step(uncond + cfg * (cond - uncond), x);
  }
  return x;
}

at::Tensor library_sample(Solver solver, int steps, double shift, double cfg, const Field& field,
                          const at::Tensor& noise, std::vector<double>* seen = nullptr) {
  SamplerOptions options;
  options.solver = solver;
  options.steps = steps;
  options.shift = shift;
  options.cfg = cfg;
  VelocityField velocity = [&](const at::Tensor& x, const at::Tensor& t, bool conditional) {
    const double timestep = t[0].item<double>();
    if (seen && conditional) seen->push_back(timestep);
    return field(x, timestep, conditional);
  };
  return sample_flow(noise, velocity, options);
}

double relative_error(const at::Tensor& ours, const at::Tensor& reference) {
  return (ours.to(torch::kDouble) - reference).abs().max().item<double>() / reference.abs().max().item<double>();
}

}  // namespace

// 10 guided steps at the shifts 5, 3 and 1 and a guidance of 5, step for
// step as the official scheduler: the same timesteps reach the model and
// the result agrees to 1e-4 of its largest value.
template <class Reference>
void expect_official_steps(Solver solver, uint64_t seed) {
  torch::manual_seed(seed);
  const Field field;
  const auto noise = torch::randn({1, 2, 3, 4, 8});
  for (double shift : {5.0, 3.0, 1.0}) {
    Reference ref(10, shift);
    std::vector<double> seen;
    const auto ours = library_sample(solver, 10, shift, 5.0, field, noise, &seen);
    const auto expected = reference_sample(ref, field, noise, 5.0);
    EXPECT_EQ(seen, ref.timesteps) << "shift " << shift;
    EXPECT_LT(relative_error(ours, expected), 1e-4) << "shift " << shift;
  }
}

TEST(FlowSolver, UniPCFollowsTheOfficialSchedulerStepForStep) {
  expect_official_steps<ReferenceUniPC>(Solver::UniPC, 11);
}

TEST(FlowSolver, DpmPlusPlusFollowsTheOfficialSchedulerStepForStep) {
  expect_official_steps<ReferenceDpm>(Solver::DpmPlusPlus, 12);
}

// The comparison above is sharp enough to see a solver's order: the
// reference run as UniPC of order 1 (no history terms) or order 3 misses
// the library's order 2 by far more than the tolerance.
TEST(FlowSolver, AnotherOrderMissesTheReference) {
  torch::manual_seed(13);
  const Field field;
  const auto noise = torch::randn({1, 2, 3, 4, 8});
  const auto ours = library_sample(Solver::UniPC, 10, 5.0, 5.0, field, noise);
  for (int order : {1, 3}) {
    ReferenceUniPC other(10, 5.0, order);
    EXPECT_GT(relative_error(ours, reference_sample(other, field, noise, 5.0)), 1e-3) << "order " << order;
  }
  ReferenceUniPC as_released(10, 5.0);
  EXPECT_LT(relative_error(ours, reference_sample(as_released, field, noise, 5.0)), 1e-4);
}

// UniPC and DPM++ start from different sigmas (0.999 and 1) and round the
// timesteps the model sees down to whole numbers; Euler does neither.
TEST(FlowSolver, SchedulesStartWhereTheReleaseStartsAndRoundTimestepsDown) {
  const auto unipc = make_flow_solver(Solver::UniPC, 50, 5.0);
  const auto dpm = make_flow_solver(Solver::DpmPlusPlus, 50, 5.0);
  const auto euler = make_flow_solver(Solver::Euler, 50, 5.0);
  // 5 * 0.999 / (1 + 4 * 0.999) = 0.99979..., so the first timestep is 999.
  EXPECT_EQ(unipc->timestep(0), 999.0);
  EXPECT_EQ(dpm->timestep(0), 1000.0);
  EXPECT_EQ(euler->timestep(0), 1000.0);
  for (const auto* solver : {unipc.get(), dpm.get()}) {
    ASSERT_EQ(solver->steps(), 50);
    ASSERT_EQ(solver->sigmas().size(), 51u);
    EXPECT_EQ(solver->sigmas().back(), 0.0);
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(solver->timestep(i), std::floor(solver->timestep(i)));
      EXPECT_LE(solver->timestep(i), 1000.0 * solver->sigmas()[i] + 1e-3);
      EXPECT_GT(solver->timestep(i) + 1.0, 1000.0 * solver->sigmas()[i] - 1e-3);
    }
  }
  // The last DPM++ step starts at shift_sigma(1/50): 1000 * 5 * 0.02 / 1.08 = 92.59...
  EXPECT_EQ(dpm->timestep(49), 92.0);
  EXPECT_THROW(make_flow_solver(Solver::UniPC, 0, 5.0), std::invalid_argument);
  EXPECT_EQ(solver_from_name("dpm++"), Solver::DpmPlusPlus);
  EXPECT_EQ(solver_from_name("unipc"), Solver::UniPC);
  EXPECT_FALSE(solver_from_name("ddim").has_value());
}

// On a straight path (the velocity eps - x0 everywhere), started on it,
// every solver's data prediction is x0 at every step, so each lands on x0 whatever its
// coefficients; with TI2V's first frame held it stays the picture's exactly,
// and with two experts each takes the steps its timesteps give it.
TEST(FlowSolver, EverySolverLandsOnTheStraightPathsEndWithAFirstFrameAndTwoExperts) {
  torch::manual_seed(14);
  const auto x0 = torch::randn({1, 2, 3, 4, 4});
  const auto eps = torch::randn({1, 2, 3, 4, 4});
  for (Solver solver : {Solver::Euler, Solver::UniPC, Solver::DpmPlusPlus}) {
    SamplerOptions options;
    options.solver = solver;
    options.steps = 12;
    options.shift = 5.0;
    options.cfg = 3.0;
    options.first_frame = x0.slice(2, 0, 1);
    std::string who;
    VelocityField low = [&](const at::Tensor& x, const at::Tensor& t, bool) {
      who += 'L';
      EXPECT_TRUE(t.slice(1, 0, 4).eq(0).all().item<bool>());  // frame 0's tokens at t = 0
      EXPECT_TRUE(torch::equal(x.slice(2, 0, 1), x0.slice(2, 0, 1)));
      return eps - x0;
    };
    HighNoiseExpert high{[&](const at::Tensor&, const at::Tensor&, bool) {
                           who += 'H';
                           return eps - x0;
                         },
                         4.0, 0.875};
    // The path's point at the solver's first sigma (UniPC's is 0.9998, not 1).
    const auto schedule = make_flow_solver(solver, 12, 5.0);
    const double first = schedule->sigmas()[0];
    const auto sample = sample_flow((1 - first) * x0 + first * eps, low, options, &high);
    std::string expected;
    for (int i = 0; i < 12; ++i) expected += schedule->timestep(i) >= 875.0 ? "HH" : "LL";
    EXPECT_EQ(who, expected) << solver_name(solver);
    EXPECT_TRUE(torch::equal(sample.slice(2, 0, 1), x0.slice(2, 0, 1))) << solver_name(solver);
    EXPECT_TRUE(torch::allclose(sample, x0, 1e-5, 1e-5))
        << solver_name(solver) << ": " << (sample - x0).abs().max().item<double>();
  }
}

// A few-step student's recorded sampler: read back as written, absent when
// none is recorded, and each malformed field one line naming the source and
// the key (sigmas that are not the solver's included).
TEST(StudentSampler, ReadsItsFieldsAndNamesWhatIsWrong) {
  const std::map<std::string, std::string> good = {{"sampler_solver", "euler"},
                                                   {"sampler_steps", "2"},
                                                   {"sampler_shift", "3"},
                                                   {"sampler_sigmas", "1,0.75,0"},
                                                   {"lora_rank", "4"}};
  const auto sampler = student_sampler_from(good, "f.safetensors");
  ASSERT_TRUE(sampler.has_value());
  EXPECT_EQ(sampler->solver, Solver::Euler);
  EXPECT_EQ(sampler->steps, 2);
  EXPECT_EQ(sampler->shift, 3.0);
  EXPECT_EQ(sampler->sigmas, sampling_sigmas(2, 3.0));
  EXPECT_EQ(describe(*sampler), "euler, 2 steps at shift 3 (sigmas 1, 0.75, 0)");
  EXPECT_EQ(student_sampler_fields(good).size(), 4u);  // lora_rank is not the sampler's
  EXPECT_FALSE(student_sampler_from({{"format", "pt"}}, "f.safetensors").has_value());
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> bad = {
      {{"sampler_solver", "heun"}, "f.safetensors: sampler_solver 'heun' is none of wansample's"},
      {{"sampler_steps", "2.5"}, "f.safetensors: sampler_steps 2.5 is no number of steps"},
      {{"sampler_shift", "x"}, "f.safetensors: sampler_shift 'x' is not a number"},
      {{"sampler_sigmas", "1,0.5,0"}, "f.safetensors: sampler_sigmas 1,0.5,0 are not euler's at 2 steps and shift 3"},
  };
  for (const auto& [field, line] : bad) {
    auto fields = good;
    fields[field.first] = field.second;
    try {
      student_sampler_from(fields, "f.safetensors");
      ADD_FAILURE() << field.first << " accepted";
    } catch (const wt::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), line);
    }
  }
  auto missing = good;
  missing.erase("sampler_shift");
  EXPECT_THROW(student_sampler_from(missing, "f.safetensors"), wt::UsageError);
}
