// The pieces of an optimizer step around AdamW: LR schedule and scaling,
// gradient norm and clipping, EMA, dynamic loss scaling.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "wantrain/train/ema.hpp"
#include "wantrain/train/adamw_step.hpp"
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

// The multi-tensor update (a GPU's) averages as the per-tensor one does:
// 20 updates of changing weights of several shapes, one of them bf16.
TEST(Ema, TheMultiTensorUpdateEqualsThePerTensorOneTo1e6) {
  torch::manual_seed(9);
  std::vector<at::Tensor> weights = {torch::randn({7, 3}), torch::randn({5}), torch::randn({4}).to(torch::kBFloat16)};
  Ema::NamedTensors named;
  for (size_t i = 0; i < weights.size(); ++i) named.emplace_back("w" + std::to_string(i), weights[i]);
  Ema per_tensor(named, 0.95), multi_tensor(named, 0.95);
  for (int step = 0; step < 20; ++step) {
    for (auto& w : weights) w.add_(torch::randn(w.sizes()).to(w.scalar_type()));
    per_tensor.update();
    multi_tensor.update_multi_tensor();
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(torch::allclose(multi_tensor.averages()[i].second, per_tensor.averages()[i].second, 1e-6, 1e-6)) << i;
    EXPECT_FALSE(torch::allclose(per_tensor.averages()[i].second, weights[i].to(torch::kFloat32), 1e-3, 1e-3)) << i;
  }
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

// The multi-tensor and the fused AdamW steps take torch::optim::AdamW's
// steps: 20 of them with weight decay, a changing rate, tensors of several
// shapes (one larger than a thread's share of a fused pass, one
// non-contiguous: tensor ops) and one parameter without a gradient, which
// neither touches.
void expect_torch_adamw_steps(void (*take_step)(torch::optim::AdamW&)) {
  torch::manual_seed(5);
  const std::vector<std::vector<int64_t>> shapes = {{7, 3}, {5}, {2, 2, 4}, {300, 257}, {6, 4}, {1}};
  std::vector<at::Tensor> mine, reference;
  for (const auto& shape : shapes) {
    auto t = torch::randn(shape);
    mine.push_back(t.clone().requires_grad_());
    reference.push_back(t.clone().requires_grad_());
  }
  mine[4] = mine[4].detach().t().contiguous().t().requires_grad_();  // the same values, strided
  ASSERT_FALSE(mine[4].is_contiguous());
  const auto options = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.05).eps(1e-8);
  torch::optim::AdamW my_optimizer(mine, options), torch_optimizer(reference, options);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i + 1 < shapes.size(); ++i) {  // the last parameter never gets a gradient
      const auto g = torch::randn(shapes[i]) * (1.0 + step);
      mine[i].mutable_grad() = g.clone();
      reference[i].mutable_grad() = g.clone();
    }
    for (auto* o : {&my_optimizer, &torch_optimizer})
      for (auto& group : o->param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(1e-2 / (1 + step));
    take_step(my_optimizer);
    torch_optimizer.step();
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(torch::allclose(mine[i], reference[i], 1e-6, 1e-7)) << "parameter " << i;
    const auto a = my_optimizer.state().find(wt::train::optimizer_key(mine[i]));
    const auto b = torch_optimizer.state().find(wt::train::optimizer_key(reference[i]));
    ASSERT_EQ(a == my_optimizer.state().end(), b == torch_optimizer.state().end()) << i;
    if (a == my_optimizer.state().end()) continue;
    const auto& sa = static_cast<const torch::optim::AdamWParamState&>(*a->second);
    const auto& sb = static_cast<const torch::optim::AdamWParamState&>(*b->second);
    EXPECT_EQ(sa.step(), 20);
    EXPECT_EQ(sa.step(), sb.step());
    // To 1e-6 of the moment's scale: where a moment cancels to near zero an
    // ulp of difference in rounding order (ATen fuses a multiply-add that the
    // fused pass does not) is large against the value itself.
    for (const auto& [a_moment, b_moment] :
         {std::make_pair(sa.exp_avg(), sb.exp_avg()), std::make_pair(sa.exp_avg_sq(), sb.exp_avg_sq())})
      EXPECT_TRUE(torch::allclose(a_moment, b_moment, 1e-6, 1e-6 * b_moment.abs().max().item<double>())) << i;
  }
  EXPECT_TRUE(torch::equal(mine.back(), reference.back()));  // untouched: no gradient
}

TEST(ForeachAdamW, TakesTorchAdamWsStepsTo1e6) { expect_torch_adamw_steps(wt::train::foreach_adamw_step); }

TEST(FusedAdamW, TakesTorchAdamWsStepsTo1e6) {
  expect_torch_adamw_steps(wt::train::fused_adamw_step);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);  // the fused pass split over threads: the same arithmetic per element
  expect_torch_adamw_steps(wt::train::fused_adamw_step);
  at::set_num_threads(threads);
}
