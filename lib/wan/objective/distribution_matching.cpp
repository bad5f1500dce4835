#include "wantrain/wan/objective/distribution_matching.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "wantrain/data/sampler.hpp"
#include "wantrain/wan/model/flow_matching.hpp"

namespace wt::wan {
namespace {

// Keys the draws apart from the noise and the consistency points of the same (seed, step, sample).
constexpr uint64_t kDrawSalt = 0x646d645f64726177;           // "dmd_draw"
constexpr uint64_t kMatchingNoiseSalt = 0x646d645f6e6f6973;  // "dmd_nois"
constexpr uint64_t kFakeNoiseSalt = 0x646d645f66616b65;      // "dmd_fake"
// DMD's range of the matching timestep, before the shift: [0.02, 0.98] of the schedule.
constexpr double kMatchingLow = 0.02, kMatchingHigh = 0.98;

double uniform(data::PortableRandom& r) { return double(r.below(uint64_t(1) << 53)) / double(uint64_t(1) << 53); }

}  // namespace

MatchingDraws matching_draws(const std::vector<int64_t>& sample_indices, uint64_t seed, int64_t step, int steps,
                             double shift) {
  MatchingDraws draws;
  for (const int64_t index : sample_indices) {
    data::PortableRandom r(sample_key(seed ^ kDrawSalt, step, index));
    draws.generator_steps.push_back(int(r.below(uint64_t(steps))));
    draws.matching_sigmas.push_back(shift_sigma(kMatchingLow + (kMatchingHigh - kMatchingLow) * uniform(r), shift));
    draws.fake_sigmas.push_back(shift_sigma(uniform(r), shift));
    draws.matching_noise_keys.push_back(sample_key(seed ^ kMatchingNoiseSalt, step, index));
    draws.fake_noise_keys.push_back(sample_key(seed ^ kFakeNoiseSalt, step, index));
  }
  return draws;
}

at::Tensor generator_sample(const at::Tensor& start, const std::vector<int>& generator_steps,
                            const std::vector<double>& edges, const SigmaVelocity& student_without_gradient,
                            const SigmaVelocity& student, bool full_depth) {
  const auto b = int64_t(generator_steps.size());
  TORCH_CHECK(b == start.size(0), "one generator step per row");
  auto x = start.to(torch::kFloat32);
  const int deepest =
      full_depth ? int(edges.size()) - 2 : *std::max_element(generator_steps.begin(), generator_steps.end());
  {
    torch::NoGradGuard no_grad;
    for (int j = 0; j < deepest; ++j) {
      // Every row steps (one batched call); the rows already at their k keep x.
      auto moves = torch::zeros({b}, torch::kFloat32);
      for (int64_t i = 0; i < b; ++i)
        if (generator_steps[size_t(i)] > j) moves[i] = float(edges[size_t(j) + 1] - edges[size_t(j)]);
      const auto sigma = torch::full({b}, float(edges[size_t(j)]), torch::kFloat32).to(x.device());
      x = x + per_row(moves, x) * student_without_gradient(x, sigma).to(torch::kFloat32);
    }
  }
  auto sigma = torch::empty({b}, torch::kFloat32);
  for (int64_t i = 0; i < b; ++i) sigma[i] = float(edges[size_t(generator_steps[size_t(i)])]);
  sigma = sigma.to(x.device());
  return x - per_row(sigma, x) * student(x, sigma).to(torch::kFloat32);
}

at::Tensor matching_direction(const at::Tensor& generated, const at::Tensor& noised, const at::Tensor& sigma,
                              const SigmaVelocity& guided_teacher, const SigmaVelocity& fake_score,
                              const at::Tensor& moving) {
  torch::NoGradGuard no_grad;
  const auto x = noised.to(torch::kFloat32);
  const auto t = per_row(sigma, x);
  const auto real = x - t * guided_teacher(x, sigma).to(torch::kFloat32);
  const auto fake = x - t * fake_score(x, sigma).to(torch::kFloat32);
  std::vector<int64_t> elements;
  for (int64_t d = 1; d < x.dim(); ++d) elements.push_back(d);
  auto distance = (generated.detach().to(torch::kFloat32) - real).abs();
  at::Tensor normaliser;
  if (moving.defined()) {
    const auto mask = moving.expand_as(distance);
    normaliser = (distance * mask).sum(elements, /*keepdim=*/true) / mask.sum(elements, /*keepdim=*/true);
  } else {
    normaliser = distance.mean(elements, /*keepdim=*/true);
  }
  // A sample on the teacher's estimate exactly has nothing to move; a
  // non-finite estimate stays non-finite, for the Engine to skip the step.
  const auto moved = normaliser > 0;
  return torch::where(moved, (fake - real) / torch::where(moved, normaliser, torch::ones_like(normaliser)),
                      torch::zeros_like(fake));
}

at::Tensor generator_losses(const at::Tensor& generated, const at::Tensor& direction) {
  std::vector<int64_t> elements;
  for (int64_t d = 1; d < generated.dim(); ++d) elements.push_back(d);
  const auto wanted = (generated.detach() - direction).detach();
  return 0.5 * (generated.to(torch::kFloat32) - wanted).pow(2).mean(elements);
}

at::Tensor teacher_sample(const at::Tensor& start, const std::vector<double>& grid,
                          const SigmaVelocity& guided_teacher) {
  torch::NoGradGuard no_grad;
  auto x = start.to(torch::kFloat32);
  const int64_t b = x.size(0);
  for (size_t j = 0; j + 1 < grid.size(); ++j) {
    const auto sigma = torch::full({b}, float(grid[j]), torch::kFloat32).to(x.device());
    x = x + float(grid[j + 1] - grid[j]) * guided_teacher(x, sigma).to(torch::kFloat32);
  }
  return x;
}

}  // namespace wt::wan
