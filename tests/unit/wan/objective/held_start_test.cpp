// Wan2.2-Fun-5B-Control's held start in training (WanConfig::holds_start_frame):
// a row whose condition y shows a start trains with its latent frame 0 the
// start's latents in y, those tokens at timestep 0 and that frame out of its
// loss; a row without one (none given, or dropped by --start-drop) trains as
// any Fun-Control row. Written out by hand here from the noise the step
// draws: x_t, the per-token timesteps and the per-row means.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "wantrain/wan/model/flow_matching.hpp"
#include "wantrain/wan/model/fun_control_start.hpp"
#include "wantrain/wan/model/model_config.hpp"
#include "wantrain/wan/model/wan_model.hpp"
#include "wantrain/wan/objective/flow_matching_objective.hpp"

namespace {

using namespace wt;

constexpr const char* kFiveBControl = R"({"model_type": "ti2v", "dim": 32, "ffn_dim": 48, "num_heads": 2,
    "num_layers": 1, "freq_dim": 32, "text_dim": 16, "text_len": 8, "patch_size": [1, 2, 2], "in_dim": 148,
    "out_dim": 48, "eps": 1e-6, "qk_norm": true, "cross_attn_norm": true})";

struct HeldStartBatch {
  train::Batch batch;
  at::Tensor x0, y;
};

// Two rows of 3 latent frames of 4 x 4: row 0's y shows its start (mask 1 on
// latent frame 0, the start's latents there), row 1's shows none. The held
// frame is y's start, as the pipeline and train_control.py hold it.
HeldStartBatch two_rows() {
  torch::manual_seed(5);
  HeldStartBatch b;
  b.x0 = torch::randn({2, 48, 3, 4, 4});
  b.y = torch::zeros({2, 100, 3, 4, 4});
  b.y.narrow(1, 0, 48).normal_();                   // the control's latents
  b.y[0].narrow(0, 48, 4).select(1, 0).fill_(1.0);  // the mask keeps frame 0
  // The start's latents: near the clip's frame 0 but not it, to tell which the step holds.
  b.y[0].narrow(0, 52, 48).select(1, 0).copy_(b.x0[0].select(1, 0) + 0.25);
  b.batch.indices = {3, 1};
  b.batch.tensors.emplace("latents", b.x0);
  b.batch.tensors.emplace("text_emb", torch::randn({2, 8, 16}));
  b.batch.tensors.emplace("y", b.y);
  return b;
}

}  // namespace

TEST(HeldStart, ARowShowingItsStartTrainsWithItCleanAtTimestepZeroAndOutOfItsLoss) {
  const auto config = wan::parse_model_config(kFiveBControl, "5b-control");
  ASSERT_TRUE(config.holds_start_frame());
  torch::manual_seed(7);
  wan::WanModel model(config);
  const auto rows = two_rows();
  EXPECT_EQ(wan::start_given(rows.y, 48), (std::vector<bool>{true, false}));
  EXPECT_TRUE(torch::equal(wan::start_latents(rows.y, 48), rows.y.narrow(1, 52, 48).narrow(2, 0, 1)));
  wan::FlowMatchingObjectiveOptions options;
  options.seed = 11;
  const int64_t step = 4;
  wan::FlowMatchingObjective objective(*model, options);
  const auto loss = objective.loss(rows.batch, {step}).loss;

  // By hand: sigma and eps as the step draws them; x_t = (1 - sigma) x0 + sigma eps.
  const auto noise = wan::training_noise(rows.x0.sizes(), rows.batch.indices, options.seed, step, options.flow);
  const auto sigma = noise.sigmas.view({2, 1, 1, 1, 1});
  auto x_t = (1 - sigma) * rows.x0 + sigma * noise.eps;
  x_t[0].select(1, 0).copy_(rows.y[0].narrow(0, 52, 48).select(1, 0));  // row 0's start, clean
  // 3 frames of 2 x 2 tokens; row 0's first 4 at 0.
  auto t = (noise.sigmas * 1000.0).view({2, 1}).expand({2, 12}).clone();
  t[0].narrow(0, 0, 4).zero_();
  wan::ModelCondition condition;
  condition.y = rows.y;
  at::Tensor prediction;
  {
    torch::NoGradGuard no_grad;
    prediction = model->forward(x_t, t, rows.batch.at("text_emb"), condition);
  }
  const auto squared = (prediction - (noise.eps - rows.x0)).square();
  const auto row0 = squared[0].narrow(1, 1, 2).mean(), row1 = squared[1].mean();
  const double expected = ((row0 + row1) / 2).item<double>();
  EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * expected);

  // Its start dropped (--start-drop 1): nothing held, every frame in the loss.
  options.start_drop = 1.0;
  wan::FlowMatchingObjective dropped(*model, options);
  const auto plain = dropped.loss(rows.batch, {step}).loss;
  auto y = rows.y.clone();
  y.narrow(1, 48, 52).zero_();
  condition.y = y;
  const auto x_plain = (1 - sigma) * rows.x0 + sigma * noise.eps;
  at::Tensor v;
  {
    torch::NoGradGuard no_grad;
    v = model->forward(x_plain, noise.sigmas * 1000.0, rows.batch.at("text_emb"), condition);
  }
  const double all_frames = (v - (noise.eps - rows.x0)).square().mean().item<double>();
  EXPECT_NEAR(plain.item<double>(), all_frames, 1e-5 * all_frames);
  EXPECT_GT(std::abs(plain.item<double>() - loss.item<double>()), 1e-3 * all_frames);
}
