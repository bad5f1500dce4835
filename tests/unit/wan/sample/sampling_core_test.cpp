// The one sampling core (wan/sample/sampling_core): the properties every
// caller relies on, each derived from what a sample is rather than from a
// run: a high-noise expert that is the same model changes nothing, a
// negative prompt equal to the unconditional context changes nothing, a
// kept first frame comes out as it went in, each step calls the model once
// per branch of guidance (the expert on its own steps), and a seed's noise
// is the same at every draw.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "../../../common/small_models.hpp"
#include "wantrain/wan/model/flow_solver.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"
#include "wantrain/wan/sample/sampling_core.hpp"

namespace wt::wan {
namespace {

struct Fixture {
  WanModel model = testing::seeded_small_model(testing::small_wan_config(2));
  SampleCondition condition;
  SamplerOptions sampler;
  at::Tensor noise = seeded_noise({1, 4, 2, 4, 4}, 5);
  Fixture() {
    model->eval();
    torch::manual_seed(3);
    condition.context = torch::randn({8, 16});
    sampler.solver = Solver::Euler;
    sampler.steps = 6;
    sampler.shift = 3;
    sampler.cfg = 2.5;
  }
  at::Tensor draw(const SampleModels& models) const {
    return draw_latents(models, condition, sampler, noise, at::kFloat);
  }
};

TEST(SamplingCore, AHighNoiseExpertThatIsTheSameModelChangesNothing) {
  Fixture f;
  SampleModels one;
  one.model = f.model.get();
  SampleModels two = one;
  two.high = HighNoiseModel{f.model.get(), 0.5};
  const auto alone = f.draw(one);
  EXPECT_EQ(alone.sizes(), (std::vector<int64_t>{4, 2, 4, 4}));
  EXPECT_TRUE(torch::equal(f.draw(two), alone));
  two.high_cfg = 1.0;  // its own guidance: now the high steps differ
  EXPECT_FALSE(torch::equal(f.draw(two), alone));
}

TEST(SamplingCore, ANegativeEqualToTheUnconditionalContextChangesNothing) {
  Fixture f;
  SampleModels models;
  models.model = f.model.get();
  const auto plain = f.draw(models);
  f.condition.negative = unconditional_context(f.condition.context.unsqueeze(0))[0];
  EXPECT_TRUE(torch::equal(f.draw(models), plain));
  f.condition.negative = torch::randn({8, 16});
  EXPECT_FALSE(torch::equal(f.draw(models), plain));
}

TEST(SamplingCore, AKeptFirstFrameComesOutAsItWentIn) {
  Fixture f;
  SampleModels models;
  models.model = f.model.get();
  f.condition.first_frame = torch::randn({1, 4, 1, 4, 4});
  const auto latents = f.draw(models);
  EXPECT_TRUE(torch::equal(latents.slice(1, 0, 1), f.condition.first_frame[0]));
}

TEST(SamplingCore, EachStepCallsTheModelOncePerBranchAndTheExpertOnItsOwnSteps) {
  Fixture f;
  WanModel high = testing::seeded_small_model(testing::small_wan_config(2));
  high->eval();
  const double boundary = 0.7;
  SampleModels models;
  models.model = f.model.get();
  models.high = HighNoiseModel{high.get(), boundary};
  std::map<const WanModelImpl*, int> calls;
  models.before = [&](WanModelImpl& model) { ++calls[&model]; };
  int high_steps = 0;
  const auto solver = make_flow_solver(f.sampler.solver, f.sampler.steps, f.sampler.shift, f.sampler.schedule);
  for (int i = 0; i < solver->steps(); ++i) high_steps += high_noise_step(solver->timestep(i), boundary) ? 1 : 0;
  ASSERT_GT(high_steps, 0);
  ASSERT_LT(high_steps, f.sampler.steps);
  f.draw(models);
  EXPECT_EQ(calls[high.get()], 2 * high_steps);  // guided: both branches
  EXPECT_EQ(calls[f.model.get()], 2 * (f.sampler.steps - high_steps));
  calls.clear();
  f.sampler.cfg = 1;  // the conditional branch alone
  models.high_cfg = 1;
  f.draw(models);
  EXPECT_EQ(calls[high.get()] + calls[f.model.get()], f.sampler.steps);
}

TEST(SamplingCore, ASeedsNoiseIsTheSameAtEveryDraw) {
  EXPECT_TRUE(torch::equal(seeded_noise({2, 3}, 9), seeded_noise({2, 3}, 9)));
  EXPECT_FALSE(torch::equal(seeded_noise({2, 3}, 9), seeded_noise({2, 3}, 10)));
}

}  // namespace
}  // namespace wt::wan
