// The pieces of an optimizer step around AdamW: LR schedule and scaling,
// gradient norm and clipping, EMA, dynamic loss scaling.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/train/ema.hpp"
#include "wantrain/train/foreach_adamw.hpp"
#include "wantrain/train/gradients.hpp"
#include "wantrain/train/loss_scaler.hpp"
#include "wantrain/train/lr_schedule.hpp"
#include "wantrain/util/error.hpp"

using namespace wt::train;

TEST(LrSchedule, WarmUpRisesLinearlyToThePeak) {
  const LrSchedule s{0.4, Schedule::Constant, 4, 100};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1), 0.2);
  EXPECT_DOUBLE_EQ(s.at(3), 0.4);
  EXPECT_DOUBLE_EQ(s.at(4), 0.4);
  EXPECT_DOUBLE_EQ(s.at(99), 0.4);
}

TEST(LrSchedule, CosineFallsFromThePeakToZeroAtTheLastStep) {
  const LrSchedule s{1.0, Schedule::Cosine, 10, 110};  // 100 decay steps after warm-up
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.5, 1e-12);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(s.at(35), 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_NEAR(s.at(110), 0.0, 1e-12);
  for (int64_t step = 11; step < 110; ++step) EXPECT_LT(s.at(step), s.at(step - 1));
}

TEST(LrSchedule, ScalingRuleMultipliesByTheEffectiveBatch) {
  EXPECT_DOUBLE_EQ(scaled_lr(1e-4, 64, true), 6.4e-3);
  EXPECT_DOUBLE_EQ(scaled_lr(1e-4, 64, false), 1e-4);
}

TEST(Gradients, GlobalNormAndClippingAcrossBuffers) {
  auto a = torch::tensor({3.0f, 0.0f}), b = torch::tensor({4.0f});
  EXPECT_DOUBLE_EQ(global_norm({a, b}), 5.0);
  clip_to_norm({a, b}, 5.0, 10.0);  // under the limit: untouched
  EXPECT_EQ(a[0].item<float>(), 3.0f);
  clip_to_norm({a, b}, 5.0, 1.0);  // scaled by 1/(5 + 1e-6)
  EXPECT_NEAR(global_norm({a, b}), 1.0, 1e-6);
  EXPECT_NEAR(a[0].item<float>() / b[0].item<float>(), 0.75, 1e-6);  // direction kept
  clip_to_norm({a, b}, 5.0, 0.0);                                    // 0: off
  EXPECT_NEAR(global_norm({a, b}), 1.0, 1e-6);
  EXPECT_TRUE(std::isnan(global_norm({torch::tensor({1.0f, NAN})})));
  EXPECT_TRUE(std::isinf(global_norm({torch::tensor({INFINITY})})));
}

TEST(Ema, AveragesTowardsTheWeightsByTheDecay) {
  auto w = torch::full({2}, 1.0);
  Ema ema({{"w", w}}, 0.9);
  w.fill_(11.0);
  ema.update();  // 0.9 * 1 + 0.1 * 11 = 2
  EXPECT_NEAR(ema.averages()[0].second[0].item<float>(), 2.0, 1e-6);
  ema.update();  // 0.9 * 2 + 0.1 * 11 = 2.9
  EXPECT_NEAR(ema.averages()[0].second[1].item<float>(), 2.9, 1e-6);
  EXPECT_EQ(ema.averages()[0].first, "w");
  EXPECT_EQ(ema.averages()[0].second.scalar_type(), torch::kFloat32);
}

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterAnIntervalOfGoodSteps) {
  LossScaler scaler({/*initial*/ 1024, /*growth*/ 2, /*backoff*/ 0.5, /*interval*/ 3});
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(true);  // third good step in a row
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(true);
  scaler.update(false);  // resets the run of good steps
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  for (int i = 0; i < 20; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1);  // never below 1
}

// The multi-tensor AdamW step takes torch::optim::AdamW's steps: 20 of them
// with weight decay, a changing rate, tensors of several shapes and one
// parameter without a gradient, which neither touches.
TEST(ForeachAdamW, TakesTorchAdamWsStepsTo1e6) {
  torch::manual_seed(5);
  const std::vector<std::vector<int64_t>> shapes = {{7, 3}, {5}, {2, 2, 4}, {1}};
  std::vector<at::Tensor> mine, reference;
  for (const auto& shape : shapes) {
    auto t = torch::randn(shape);
    mine.push_back(t.clone().requires_grad_());
    reference.push_back(t.clone().requires_grad_());
  }
  const auto options = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.05).eps(1e-8);
  torch::optim::AdamW foreach_optimizer(mine, options), torch_optimizer(reference, options);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i + 1 < shapes.size(); ++i) {  // the last parameter never gets a gradient
      const auto g = torch::randn(shapes[i]) * (1.0 + step);
      mine[i].mutable_grad() = g.clone();
      reference[i].mutable_grad() = g.clone();
    }
    for (auto* o : {&foreach_optimizer, &torch_optimizer})
      for (auto& group : o->param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(1e-2 / (1 + step));
    wt::train::foreach_adamw_step(foreach_optimizer);
    torch_optimizer.step();
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(torch::allclose(mine[i], reference[i], 1e-6, 1e-7)) << "parameter " << i;
    const auto a = foreach_optimizer.state().find(wt::train::optimizer_key(mine[i]));
    const auto b = torch_optimizer.state().find(wt::train::optimizer_key(reference[i]));
    ASSERT_EQ(a == foreach_optimizer.state().end(), b == torch_optimizer.state().end()) << i;
    if (a == foreach_optimizer.state().end()) continue;
    const auto& sa = static_cast<const torch::optim::AdamWParamState&>(*a->second);
    const auto& sb = static_cast<const torch::optim::AdamWParamState&>(*b->second);
    EXPECT_EQ(sa.step(), 20);
    EXPECT_EQ(sa.step(), sb.step());
    EXPECT_TRUE(torch::allclose(sa.exp_avg(), sb.exp_avg(), 1e-6, 1e-9)) << i;
    EXPECT_TRUE(torch::allclose(sa.exp_avg_sq(), sb.exp_avg_sq(), 1e-6, 1e-12)) << i;
  }
  EXPECT_TRUE(torch::equal(mine.back(), reference.back()));  // untouched: no gradient
}
