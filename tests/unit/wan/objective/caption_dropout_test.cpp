// Caption dropout: which captions are dropped, and what replaces them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "wantrain/wan/objective/caption_dropout.hpp"
#include "wantrain/wan/model/unconditional_context.hpp"

using namespace wt::wan;

TEST(CaptionDropout, TheUnconditionalContextIsAPromptOfNoTokens) {
  const auto context = torch::randn({2, 5, 3});
  const auto uncond = unconditional_context(context);
  EXPECT_EQ(uncond.sizes(), context.sizes());
  EXPECT_TRUE(torch::equal(uncond, torch::zeros({2, 5, 3})));
}

TEST(CaptionDropout, DropsOnlyTheChosenRowsAndLeavesTheInputAlone) {
  const auto context = torch::randn({3, 4, 2});
  const auto before = context.clone();
  const auto dropped = drop_captions(context, {false, true, false});
  EXPECT_TRUE(torch::equal(context, before));
  EXPECT_TRUE(torch::equal(dropped[0], context[0]));
  EXPECT_TRUE(torch::equal(dropped[1], unconditional_context(context[1])));
  EXPECT_TRUE(torch::equal(dropped[2], context[2]));
  EXPECT_TRUE(torch::equal(drop_captions(context, {false, false, false}), context));
}

TEST(CaptionDropout, ProbabilityZeroNeverAndOneAlwaysDrops) {
  const std::vector<int64_t> indices{0, 5, 9, 2};
  for (int64_t step = 0; step < 50; ++step) {
    for (bool d : caption_drops(indices, 3, step, 0.0)) EXPECT_FALSE(d);
    for (bool d : caption_drops(indices, 3, step, 1.0)) EXPECT_TRUE(d);
  }
}

TEST(CaptionDropout, DrawDependsOnSeedStepAndSampleNotOnTheBatch) {
  // Sample 7's draw is the same whatever batch it is in and wherever.
  const auto whole = caption_drops({3, 7, 1, 8}, 11, 4, 0.5);
  const auto alone = caption_drops({7}, 11, 4, 0.5);
  const auto reordered = caption_drops({8, 1, 7, 3}, 11, 4, 0.5);
  EXPECT_EQ(whole[1], alone[0]);
  EXPECT_EQ(whole[1], reordered[2]);
  EXPECT_EQ(whole[0], reordered[3]);
  // Over many (step, sample) pairs the draws differ with the step and the seed.
  std::vector<int64_t> indices(200);
  std::iota(indices.begin(), indices.end(), 0);
  EXPECT_NE(caption_drops(indices, 11, 4, 0.5), caption_drops(indices, 11, 5, 0.5));
  EXPECT_NE(caption_drops(indices, 11, 4, 0.5), caption_drops(indices, 12, 4, 0.5));
}

TEST(CaptionDropout, RateIsTheProbability) {
  // 20000 Bernoulli(p) draws: the count's standard deviation is sqrt(n p (1-p)); allow 5 of them.
  const int n = 20000;
  std::vector<int64_t> indices(n);
  std::iota(indices.begin(), indices.end(), 0);
  for (double p : {0.1, 0.5}) {
    const auto drops = caption_drops(indices, 42, 17, p);
    const double count = double(std::count(drops.begin(), drops.end(), true));
    EXPECT_NEAR(count, n * p, 5 * std::sqrt(n * p * (1 - p))) << "p " << p;
  }
}

// The first-frame draw (--first-frame-prob) is keyed like caption dropout
// but is a stream of its own; a still (one latent frame) never keeps it.
TEST(CaptionDropout, FirstFrameDrawsAreTheirOwnStreamAndNeverKeepAStill) {
  std::vector<int64_t> indices(2000);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
  const auto kept = first_frame_draws(indices, 5, 3, 0.5, 21);
  const auto dropped = caption_drops(indices, 5, 3, 0.5);
  int both = 0, count = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    count += kept[i];
    both += kept[i] && dropped[i];
  }
  // Binomial(2000, 0.5): sd 22, so +-150 is 6.7 sd; independent streams
  // agree on about a quarter (sd 19; +-130 is 6.7 sd).
  EXPECT_NEAR(count, 1000, 150);
  EXPECT_NEAR(both, 500, 130);
  for (bool k : first_frame_draws(indices, 5, 3, 1.0, 1)) EXPECT_FALSE(k);
  for (bool k : first_frame_draws(indices, 5, 3, 1.0, 2)) EXPECT_TRUE(k);
  EXPECT_EQ(first_frame_draws({7}, 5, 3, 0.5, 21)[0], kept[7]);  // not a function of the batch
}

// A Fun-Control model's control and start-frame drops (--control-drop,
// --start-drop) are streams of their own, independent of each other and of
// caption dropout; drop_fun_control zeroes the drawn part of the drawn rows
// and leaves everything else, and its input, alone.
TEST(CaptionDropout, FunControlDropsAreTheirOwnStreamsAndZeroTheirPartOfY) {
  std::vector<int64_t> indices(2000);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
  const auto control = control_drops(indices, 5, 3, 0.5), start = start_drops(indices, 5, 3, 0.5),
             caption = caption_drops(indices, 5, 3, 0.5);
  int controls = 0, with_start = 0, with_caption = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    controls += control[i];
    with_start += control[i] && start[i];
    with_caption += control[i] && caption[i];
  }
  // As above: Binomial(2000, 0.5) within 6.7 sd, independent pairs on about a quarter.
  EXPECT_NEAR(controls, 1000, 150);
  EXPECT_NEAR(with_start, 500, 130);
  EXPECT_NEAR(with_caption, 500, 130);
  EXPECT_EQ(control_drops({7}, 5, 3, 0.5)[0], control[7]);  // not a function of the batch

  const auto y = torch::randn({3, 8, 2, 2, 2});
  const auto original = y.clone();
  const auto dropped = drop_fun_control(y, 4, {true, false, false}, {false, false, true});
  EXPECT_TRUE(torch::equal(y, original));
  EXPECT_EQ(dropped[0].narrow(0, 0, 4).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(dropped[0].narrow(0, 4, 4), y[0].narrow(0, 4, 4)));
  EXPECT_TRUE(torch::equal(dropped[1], y[1]));
  EXPECT_TRUE(torch::equal(dropped[2].narrow(0, 0, 4), y[2].narrow(0, 0, 4)));
  EXPECT_EQ(dropped[2].narrow(0, 4, 4).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(drop_fun_control(y, 4, {false, false, false}, {false, false, false}).is_same(y));
  // Wan2.2-Fun's y: 3 control channels, then 5 of the start's (mask and latents).
  const auto masked = drop_fun_control(y, 3, {true, false, false}, {false, false, true});
  EXPECT_EQ(masked[0].narrow(0, 0, 3).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(masked[0].narrow(0, 3, 5), y[0].narrow(0, 3, 5)));
  EXPECT_TRUE(torch::equal(masked[2].narrow(0, 0, 3), y[2].narrow(0, 0, 3)));
  EXPECT_EQ(masked[2].narrow(0, 3, 5).abs().max().item<float>(), 0.0f);
}

// A V1.1 sample is shown its other frame with probability P (train_control.py:
// 0.6), a stream of its own; a still never (it has no other frame); the
// reference's drop is a stream of its own too.
TEST(CaptionDropout, ReferenceDrawsAreTheirOwnStreamsAndAStillShowsItsStart) {
  std::vector<int64_t> indices(2000);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
  const auto other = reference_draws(indices, 5, 3, 0.6, 2), dropped = reference_drops(indices, 5, 3, 0.5),
             start = start_drops(indices, 5, 3, 0.5);
  int shown = 0, with_drop = 0, with_start = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    shown += other[i];
    with_drop += other[i] && dropped[i];
    with_start += other[i] && start[i];
  }
  // Binomial(2000, 0.6): sd 21.9, so 150 is 6.8 sd; independent pairs on about 0.3 of them (sd 20.5).
  EXPECT_NEAR(shown, 1200, 150);
  EXPECT_NEAR(with_drop, 600, 130);
  EXPECT_NEAR(with_start, 600, 130);
  EXPECT_EQ(reference_draws({7}, 5, 3, 0.6, 2)[0], other[7]);  // not a function of the batch
  const auto still = reference_draws(indices, 5, 3, 1.0, 1);
  EXPECT_TRUE(std::none_of(still.begin(), still.end(), [](bool v) { return v; }));
}
