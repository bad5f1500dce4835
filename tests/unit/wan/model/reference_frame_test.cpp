// Fun-Control V1.1 data with a reference frame, and what a model is shown of
// them: the start, or the other frame as the reference, as VideoX-Fun's
// train_control.py builds its control_latents, full_ref and CLIP context.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/model/reference_frame.hpp"

namespace {

using wt::wan::ModelCondition;
using wt::wan::pick_reference;

constexpr int64_t kZ = 4, kTokens = 3;

// y [3, 3z, 2, 2, 2] = [control, start (frame 0), reference (frame 0)],
// clip_fea [3, 2T, 5] = [start's, reference's].
ModelCondition reference_data() {
  torch::manual_seed(3);
  ModelCondition c;
  c.y = torch::randn({3, 3 * kZ, 2, 2, 2});
  c.y.narrow(1, kZ, 2 * kZ).narrow(2, 1, 1).zero_();  // the pictures' latents: frame 0 alone
  c.clip_fea = torch::randn({3, 2 * kTokens, 5});
  return c;
}

}  // namespace

// Row 0 shows its start: y = [control, start], no reference tokens, the
// start's CLIP. Row 1 its other frame: y's start zeros, full_ref that frame's
// latent frame, its CLIP. Row 2 the other frame dropped: zeros there. The
// data are left as they were.
TEST(ReferenceFrame, EachRowShowsItsStartOrItsOtherFrameAsTrainControlBuildsThem) {
  const auto data = reference_data();
  const auto y = data.y.clone(), clip = data.clip_fea.clone();
  const auto shown = pick_reference(data, kZ, {false, true, true}, {true, false, true});
  ASSERT_EQ(shown.y.sizes(), (std::vector<int64_t>{3, 2 * kZ, 2, 2, 2}));
  ASSERT_EQ(shown.full_ref.sizes(), (std::vector<int64_t>{3, kZ, 2, 2}));
  ASSERT_EQ(shown.clip_fea.sizes(), (std::vector<int64_t>{3, kTokens, 5}));
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::equal(shown.y[i].narrow(0, 0, kZ), y[i].narrow(0, 0, kZ))) << "the control, row " << i;
  EXPECT_TRUE(torch::equal(shown.y[0].narrow(0, kZ, kZ), y[0].narrow(0, kZ, kZ)));
  EXPECT_EQ(shown.full_ref[0].abs().max().item<float>(), 0.0f) << "the start's row has no reference (its drop is moot)";
  EXPECT_TRUE(torch::equal(shown.clip_fea[0], clip[0].narrow(0, 0, kTokens)));
  EXPECT_EQ(shown.y[1].narrow(0, kZ, kZ).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(shown.full_ref[1], y[1].narrow(0, 2 * kZ, kZ).select(1, 0)));
  EXPECT_TRUE(torch::equal(shown.clip_fea[1], clip[1].narrow(0, kTokens, kTokens)));
  EXPECT_EQ(shown.y[2].narrow(0, kZ, kZ).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(shown.full_ref[2].abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(shown.clip_fea[2], clip[2].narrow(0, kTokens, kTokens)));
  EXPECT_TRUE(torch::equal(data.y, y));
  EXPECT_TRUE(torch::equal(data.clip_fea, clip));
}

// Without draws every row shows its start and full_ref stays undefined (the
// model reads zeros); shown_condition does that for a V1.1 model's config
// alone, and leaves a V1.0 model's condition (and any other) as it is.
TEST(ReferenceFrame, WithoutDrawsTheStartIsShownAndOnlyAV11ModelReadsTheLayout) {
  const auto data = reference_data();
  const auto start = pick_reference(data, kZ);
  EXPECT_FALSE(start.full_ref.defined());
  EXPECT_TRUE(torch::equal(start.y, data.y.narrow(1, 0, 2 * kZ)));
  EXPECT_TRUE(torch::equal(start.clip_fea, data.clip_fea.narrow(1, 0, kTokens)));

  wt::wan::WanConfig v11;
  v11.model_type = wt::wan::ModelType::I2V;
  v11.out_dim = kZ * 2;  // 8: clear of out_dim 4, where 3 out_dim is also Wan2.2-Fun's 2 out_dim + 4
  v11.in_dim = 3 * v11.out_dim;
  v11.ref_conv = true;
  EXPECT_EQ(v11.reference_y_channels(), 24);
  auto v10 = v11;
  v10.ref_conv = false;
  EXPECT_EQ(v10.reference_y_channels(), 0);
  auto wan22 = v11;
  wan22.in_dim = 3 * v11.out_dim + 4;
  EXPECT_EQ(wan22.reference_y_channels(), 0) << "Wan2.2-Fun's y has a mask instead";

  ModelCondition wide;
  wide.y = torch::randn({1, 24, 2, 2, 2});
  EXPECT_EQ(wt::wan::shown_condition(wide, v11).y.size(1), 16);
  EXPECT_TRUE(wt::wan::shown_condition(wide, v10).y.is_same(wide.y));
  EXPECT_THROW(pick_reference(wide, kZ), wt::Error) << "24 channels are not 3 x 4";
  EXPECT_THROW(pick_reference(data, kZ, {true}), wt::Error) << "one draw per row";
}
