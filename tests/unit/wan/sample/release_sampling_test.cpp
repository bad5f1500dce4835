// wansample's release settings against the official configs they come from
// (Wan2.1's generate.py and wan/configs, Wan2.2's wan/configs), for each
// released config of data/configs, and none for a shape no release has.
#include <gtest/gtest.h>

#include <string>

#include "../../../common/build_paths.hpp"
#include "wantrain/wan/sample/release_defaults.hpp"

using namespace wt::wan;

namespace {

WanConfig config(const std::string& name) {
  return load_model_config(std::string(WANTRAIN_SOURCE_DIR) + "/data/configs/" + name + ".json");
}

// The tail every negative prompt shares: shared_config.py's sample_neg_prompt ends so.
const std::string kSharedEnd = "三条腿，背景人很多，倒着走";
const std::string kSharedStart = "色调艳丽，过曝";

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

TEST(ReleaseSampling, EachReleasedConfigSamplesWithItsReleasesSettings) {
  constexpr int64_t k480p = 832 * 480, k720p = 1280 * 720;
  struct Row {
    std::string file;
    bool two_experts;
    int64_t pixels;
    std::string model;
    int steps;
    double shift, cfg_low, cfg_high, boundary;
    std::string negative_start;
  };
  for (const Row& row : {
           // t2v_1_3B / t2v_14B: generate.py's 50 steps, shift 5, guidance 5.
           Row{"wan2.1-t2v-1.3b", false, k480p, "Wan2.1 T2V-1.3B", 50, 5.0, 5.0, 5.0, 0.0, kSharedStart},
           Row{"wan2.1-t2v-14b", false, k720p, "Wan2.1 T2V-14B", 50, 5.0, 5.0, 5.0, 0.0, kSharedStart},
           // i2v: 40 steps; shift 3 at 832*480, else 5; "镜头晃动，" first.
           Row{"wan2.1-i2v-14b-480p", false, k480p, "Wan2.1 I2V-14B", 40, 3.0, 5.0, 5.0, 0.0, "镜头晃动，色调艳丽"},
           Row{"wan2.1-i2v-14b-720p", false, k720p, "Wan2.1 I2V-14B", 40, 5.0, 5.0, 5.0, 0.0, "镜头晃动，色调艳丽"},
           // flf2v: a copy of i2v's config with "镜头切换，" first; generate.py's shift 16, 50 steps.
           Row{"wan2.1-flf2v-14b", false, k720p, "Wan2.1 FLF2V-14B", 50, 16.0, 5.0, 5.0, 0.0,
               "镜头切换，镜头晃动，色调艳丽"},
           // Wan2.2: t2v_A14B 40 steps, shift 12, (3, 4), boundary 0.875;
           // i2v_A14B 40, 5, (3.5, 3.5), 0.9; ti2v_5B 50, 5, 5.
           Row{"wan2.2-t2v-a14b", true, k720p, "Wan2.2 T2V-A14B", 40, 12.0, 3.0, 4.0, 0.875, kSharedStart},
           Row{"wan2.2-i2v-a14b", true, k720p, "Wan2.2 I2V-A14B", 40, 5.0, 3.5, 3.5, 0.9, kSharedStart},
           Row{"wan2.2-ti2v-5b", false, 1280 * 704, "Wan2.2 TI2V-5B", 50, 5.0, 5.0, 5.0, 0.0, kSharedStart},
           // VideoX-Fun's examples/wan2.2_fun/predict_v2v_control.py: Euler ("Flow"), 50 steps, shift 5,
           // guidance 6; config/wan2.2/wan_civitai_i2v.yaml's boundary 0.900.
           Row{"wan2.2-fun-a14b-control", true, k480p, "Wan2.2-Fun-A14B-Control", 50, 5.0, 6.0, 6.0, 0.9, kSharedStart},
           // examples/wan2.2_fun/predict_v2v_control_5b.py: Euler ("Flow"), 40 steps, shift 5, guidance 6.
           Row{"wan2.2-fun-5b-control", false, 1280 * 704, "Wan2.2-Fun-5B-Control", 40, 5.0, 6.0, 6.0, 0.0,
               kSharedStart},
       }) {
    const auto r = release_sampling(config(row.file), row.two_experts, row.pixels);
    ASSERT_TRUE(r.has_value()) << row.file;
    EXPECT_EQ(r->model, row.model) << row.file;
    EXPECT_EQ(r->steps, row.steps) << row.file;
    EXPECT_EQ(r->shift, row.shift) << row.file;
    EXPECT_EQ(r->cfg_low, row.cfg_low) << row.file;
    EXPECT_EQ(r->cfg_high, row.cfg_high) << row.file;
    EXPECT_EQ(r->boundary, row.boundary) << row.file;
    EXPECT_EQ(r->negative_prompt.rfind(row.negative_start, 0), 0u) << row.file << ": " << r->negative_prompt;
    EXPECT_TRUE(ends_with(r->negative_prompt, kSharedEnd)) << row.file;
  }
}

TEST(ReleaseSampling, ShapesNoReleaseHasGetNone) {
  for (const std::string file : {"wan-mini", "wan-tiny", "wan-small", "wan-mid", "wan-tiny-i2v", "wan-tiny-ti2v",
                                 "wan-tiny-vace", "wan2.2-ti2v-5b-student", "wan-mini-student"})
    EXPECT_FALSE(release_sampling(config(file), false, 832 * 480).has_value()) << file;
  // Two experts of a shape no A14B has, and one model of an A14B expert's
  // text-to-video shape: Wan2.1's 14B settings.
  EXPECT_FALSE(release_sampling(config("wan2.1-t2v-1.3b"), true, 832 * 480).has_value());
  EXPECT_FALSE(release_sampling(config("wan2.1-i2v-14b-480p"), true, 832 * 480).has_value());
  EXPECT_FALSE(release_sampling(config("wan2.2-fun-a14b-control"), false, 832 * 480).has_value());
  EXPECT_EQ(release_sampling(config("wan2.2-fun-a14b-control"), true, 832 * 480)->solver, Solver::Euler);
  EXPECT_FALSE(release_sampling(config("wan2.2-fun-5b-control"), true, 832 * 480).has_value());
  EXPECT_EQ(release_sampling(config("wan2.2-fun-5b-control"), false, 832 * 480)->solver, Solver::Euler);
  EXPECT_EQ(release_sampling(config("wan2.2-t2v-a14b"), false, 832 * 480)->model, "Wan2.1 T2V-14B");
}

// The unconditional branch: a given negative prompt (its empty value the
// all-zero context) wins; a released model's weights get the release's
// negative prompt; a wantrain checkpoint, or a shape no release has, the
// all-zero context that --text-drop trains.
TEST(ReleaseSampling, TheUnconditionalBranchFollowsTheRule) {
  const auto release = release_sampling(config("wan2.1-t2v-1.3b"), false, 832 * 480);
  ASSERT_TRUE(release.has_value());
  const auto given = unconditional_branch(std::string("blurry"), release, false);
  EXPECT_EQ(given.negative_prompt, "blurry");
  EXPECT_EQ(given.why, "--negative-prompt's embedding");
  const auto zero = unconditional_branch(std::string(), release, false);
  EXPECT_EQ(zero.negative_prompt, "");
  EXPECT_EQ(zero.why, "the all-zero context (--negative-prompt '')");
  const auto released = unconditional_branch(std::nullopt, release, false);
  EXPECT_EQ(released.negative_prompt, release->negative_prompt);
  EXPECT_EQ(released.why, "Wan2.1 T2V-1.3B's negative prompt (sample_neg_prompt; --negative-prompt replaces it)");
  const auto checkpoint = unconditional_branch(std::nullopt, release, true);
  EXPECT_EQ(checkpoint.negative_prompt, "");
  EXPECT_EQ(checkpoint.why, "the all-zero context that wantrain --text-drop trains (a wantrain checkpoint)");
  const auto unreleased = unconditional_branch(std::nullopt, std::nullopt, false);
  EXPECT_EQ(unreleased.negative_prompt, "");
  EXPECT_EQ(unreleased.why, "the all-zero context that wantrain --text-drop trains (a model of no released shape)");
}
