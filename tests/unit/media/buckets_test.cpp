// Buckets: the resolution buckets of a pixel budget, the nearest bucket by
// aspect ratio, buckets of an item's own size without enlarging it, the
// clip lengths a video fills (lib/media/buckets), and the encode plan that
// groups a listing's items into one-shape shards (lib/wan/encode/encode_plan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "wantrain/media/buckets.hpp"
#include "wantrain/media/frame_selection.hpp"
#include "wantrain/util/error.hpp"
#include "wantrain/wan/encode/encode_plan.hpp"

namespace {

using wt::media::FrameBucketChoice;
using wt::media::FrameSize;

std::vector<std::pair<int, int>> pairs(const std::vector<FrameSize>& sizes) {
  std::vector<std::pair<int, int>> out;
  for (const auto& s : sizes) out.emplace_back(s.width, s.height);
  return out;
}

// The bucket set by its definition, independently of the width scan: of
// all sizes with sides multiples of `step` within `area`, those that no
// other such size contains, within aspect 1:4 to 4:1.
std::set<std::pair<int, int>> maximal_sizes(int64_t area, int step) {
  std::vector<std::pair<int, int>> fits;
  for (int w = step; int64_t(w) * step <= area; w += step)
    for (int h = step; int64_t(w) * h <= area; h += step) fits.emplace_back(w, h);
  std::set<std::pair<int, int>> out;
  for (const auto& [w, h] : fits) {
    const bool contained = std::any_of(fits.begin(), fits.end(), [&](const auto& o) {
      return o.first >= w && o.second >= h && (o.first != w || o.second != h);
    });
    if (!contained && w <= 4 * h && h <= 4 * w) out.emplace(w, h);
  }
  return out;
}

}  // namespace

// 64x32 = 2048 pixels in steps of 16: 64x32 and 32x64 are the only sizes
// nothing contains within aspect 4 (32x32 is inside 64x32, 48x48 is over
// the budget, 16x128 and 128x16 are 8:1).
TEST(MediaBuckets, AutoBucketsAreTheMaximalSizesWithinTheArea) {
  EXPECT_EQ(pairs(wt::media::auto_resolution_buckets(64 * 32, 16)),
            (std::vector<std::pair<int, int>>{{64, 32}, {32, 64}}));

  // Wan's 832x480 budget: the scan gives exactly the maximal sizes, sorted
  // by height then width, the budget's own size and its transpose among them.
  const int64_t area = 832 * 480;
  const auto sizes = wt::media::auto_resolution_buckets(area, 16);
  const auto expected = maximal_sizes(area, 16);
  const auto found = pairs(sizes);
  const std::set<std::pair<int, int>> found_set(found.begin(), found.end());
  EXPECT_EQ(found_set, expected);
  EXPECT_EQ(sizes.size(), expected.size());
  for (size_t i = 1; i < sizes.size(); ++i)
    EXPECT_LT(std::pair(sizes[i - 1].height, sizes[i - 1].width), std::pair(sizes[i].height, sizes[i].width));
  for (const auto& s : {std::pair{832, 480}, {480, 832}, {640, 624}, {624, 640}}) EXPECT_EQ(expected.count(s), 1u);
  EXPECT_EQ(expected.count({624, 624}), 0u);  // inside 640x624
  for (const auto& [w, h] : expected) EXPECT_EQ(expected.count({h, w}), 1u) << w << "x" << h;

  EXPECT_TRUE(wt::media::auto_resolution_buckets(15 * 16, 16).empty());  // not even 16x16
}

TEST(MediaBuckets, TheNearestBucketIsByLogAspectRatio) {
  const std::vector<FrameSize> wan{{832, 480}, {480, 832}, {624, 624}};
  EXPECT_EQ(pairs({wt::media::nearest_bucket(1920, 1080, wan)}), pairs({{832, 480}}));
  EXPECT_EQ(pairs({wt::media::nearest_bucket(1080, 1920, wan)}), pairs({{480, 832}}));
  EXPECT_EQ(pairs({wt::media::nearest_bucket(500, 510, wan)}), pairs({{624, 624}}));

  // 2:1 against 1:1 and 3.5:1: log(2) = 0.69 from 1:1, log(3.5 / 2) = 0.56
  // from 3.5:1, so 3.5:1 (by the difference of ratios 1:1 would win, 1 < 1.5).
  const std::vector<FrameSize> wide{{32, 32}, {112, 32}};
  EXPECT_EQ(pairs({wt::media::nearest_bucket(200, 100, wide)}), pairs({{112, 32}}));
  const std::vector<FrameSize> tall{{32, 32}, {32, 112}};
  EXPECT_EQ(pairs({wt::media::nearest_bucket(100, 200, tall)}), pairs({{32, 112}}));

  // Ties: 1:1 is as far from 2:1 as from 1:2; the larger area wins, then the
  // larger width, whatever the list's order.
  for (const auto& list : {std::vector<FrameSize>{{32, 16}, {64, 128}}, std::vector<FrameSize>{{64, 128}, {32, 16}}})
    EXPECT_EQ(pairs({wt::media::nearest_bucket(50, 50, list)}), pairs({{64, 128}}));
  for (const auto& list : {std::vector<FrameSize>{{32, 64}, {64, 32}}, std::vector<FrameSize>{{64, 32}, {32, 64}}})
    EXPECT_EQ(pairs({wt::media::nearest_bucket(50, 50, list)}), pairs({{64, 32}}));
}

TEST(MediaBuckets, WithoutUpscalingASmallItemGetsABucketOfItsOwnSize) {
  using wt::media::no_upscale_bucket;
  EXPECT_EQ(pairs({no_upscale_bucket(100, 60, {64, 32}, 16)}), pairs({{64, 32}}));  // covers it: downscaled
  EXPECT_EQ(pairs({no_upscale_bucket(64, 32, {64, 32}, 16)}), pairs({{64, 32}}));
  EXPECT_EQ(pairs({no_upscale_bucket(50, 40, {64, 32}, 16)}), pairs({{48, 32}}));  // rounded down to 16
  EXPECT_EQ(pairs({no_upscale_bucket(40, 10, {64, 32}, 16)}), pairs({{0, 0}}));    // a side under 16
  // Narrower than its bucket but over its area: 2000x400 against 832x480
  // (399360 pixels) scales by sqrt(399360 / 800000) = 0.7065 to 1413.1x282.6,
  // rounded down to 1408x272 (382976 pixels).
  const auto own = no_upscale_bucket(2000, 400, {832, 480}, 16);
  EXPECT_EQ(pairs({own}), pairs({{1408, 272}}));
  // Never enlarged, and never over the bucket's area, for any item size.
  for (int w = 1; w < 400; w += 7)
    for (int h = 1; h < 400; h += 11) {
      const auto b = no_upscale_bucket(w, h, {128, 96}, 16);
      if (b.width == 0) continue;
      EXPECT_TRUE(w >= b.width && h >= b.height) << w << "x" << h;
      EXPECT_LE(int64_t(b.width) * b.height, 128 * 96) << w << "x" << h;
      EXPECT_EQ(b.width % 16 + b.height % 16, 0);
    }
}

TEST(MediaBuckets, AVideoFillsTheLongestListedLengthOrEvery) {
  const std::vector<int64_t> lengths{1, 17, 33, 81};
  using wt::media::filled_lengths;
  EXPECT_EQ(filled_lengths(40, lengths, FrameBucketChoice::Longest), std::vector<int64_t>({33}));
  EXPECT_EQ(filled_lengths(40, lengths, FrameBucketChoice::All), std::vector<int64_t>({1, 17, 33}));
  EXPECT_EQ(filled_lengths(81, lengths, FrameBucketChoice::Longest), std::vector<int64_t>({81}));
  EXPECT_TRUE(filled_lengths(0, lengths, FrameBucketChoice::All).empty());
  EXPECT_TRUE(filled_lengths(4, {5, 9}, FrameBucketChoice::Longest).empty());
}

// clip_starts is what select_clips takes its windows from, counted before
// a video is decoded.
TEST(MediaBuckets, ClipStartsAreTheSelectedClips) {
  wt::media::FrameSelection s;
  for (const auto extraction :
       {wt::media::FrameExtraction::Head, wt::media::FrameExtraction::Slide, wt::media::FrameExtraction::Uniform})
    for (const int64_t n : {1, 5, 13})
      for (int64_t available = 0; available < 30; ++available) {
        s.extraction = extraction;
        s.frames = n;
        s.stride = 3;
        s.samples = 4;
        std::vector<double> times(static_cast<size_t>(available));
        for (size_t i = 0; i < times.size(); ++i) times[i] = double(i) / 16;
        std::vector<int64_t> starts;
        for (const auto& clip : wt::media::select_clips(times, s)) starts.push_back(clip.front());
        EXPECT_EQ(wt::media::clip_starts(available, s), starts);
      }
}

namespace {

wt::wan::ItemProbe video(int w, int h, int64_t frames) { return {"", w, h, false, frames}; }
wt::wan::ItemProbe still(int w, int h) { return {"", w, h, true, 1}; }

std::vector<std::vector<size_t>> items_of(const wt::wan::EncodePlan& plan) {
  std::vector<std::vector<size_t>> out;
  for (const auto& shard : plan.shards) {
    out.emplace_back();
    for (const auto& i : shard.items) out.back().push_back(i.item);
  }
  return out;
}

}  // namespace

// Stills of two aspect ratios and videos of two lengths make four buckets,
// ordered by frames, height, width; each bucket's items in listing order.
TEST(EncodePlan, ItemsAreGroupedByBucketIntoOneShapeShards) {
  const std::vector<wt::wan::ItemProbe> probes{
      still(60, 30),     // 0: 2:1 -> 64x32, 1 frame
      still(30, 60),     // 1: 1:2 -> 32x64
      video(80, 40, 9),  // 2: 9 frames
      video(80, 40, 5),  // 3: 5 frames
      video(80, 40, 3),  // 4: too short
      {"no caption"},    // 5
      still(100, 50),    // 6: 2:1
      video(40, 80, 12)  // 7: 1:2, 9 frames of 12
  };
  wt::wan::EncodeBuckets b;
  b.sizes = {{64, 32}, {32, 64}};
  b.frames = {5, 9};
  b.bucketed = true;
  wt::media::FrameSelection selection;
  auto plan = wt::wan::plan_encode(probes, b, selection, 1);
  EXPECT_EQ(items_of(plan), (std::vector<std::vector<size_t>>{{0}, {6}, {1}, {3}, {2}, {7}}));
  const std::vector<std::tuple<int64_t, int, int>> buckets{{1, 64, 32}, {1, 64, 32}, {1, 32, 64},
                                                           {5, 64, 32}, {9, 64, 32}, {9, 32, 64}};
  for (size_t k = 0; k < plan.shards.size(); ++k) {
    const auto& bucket = plan.shards[k].bucket;
    EXPECT_EQ(std::tuple(bucket.frames, bucket.size.width, bucket.size.height), buckets[k]) << "shard " << k;
  }
  ASSERT_EQ(plan.skipped.size(), 2u);
  EXPECT_EQ(plan.skipped[0], (std::pair<size_t, std::string>{4,
                                                             "too few frames: 3 at its own rate, --frames 5,9 "
                                                             "needs at least 5"}));
  EXPECT_EQ(plan.skipped[1], (std::pair<size_t, std::string>{5, "no caption"}));

  // Two items a shard: the buckets' items cut in order, never mixed.
  EXPECT_EQ(items_of(wt::wan::plan_encode(probes, b, selection, 2)),
            (std::vector<std::vector<size_t>>{{0, 6}, {1}, {3}, {2}, {7}}));

  // Every length a video fills: 2 and 7 give 5-frame clips too.
  b.choice = FrameBucketChoice::All;
  EXPECT_EQ(items_of(wt::wan::plan_encode(probes, b, selection, 8)),
            (std::vector<std::vector<size_t>>{{0, 6}, {1}, {2, 3}, {7}, {2}, {7}}));

  // Slide, stride 2: a 9-frame video gives 5-frame clips at 0, 2, 4.
  b.frames = {5};
  selection.extraction = wt::media::FrameExtraction::Slide;
  selection.stride = 2;
  plan = wt::wan::plan_encode({video(64, 32, 9)}, b, selection, 8);
  ASSERT_EQ(plan.shards.size(), 1u);
  EXPECT_EQ(plan.shards[0].clips(), 3);
}

// One size and one length is an unbucketed run: a still is a video of one
// frame, skipped unless that length is 1, and every item is made at the size.
TEST(EncodePlan, OneSizeAndOneLengthKeepTheFixedShape) {
  wt::wan::EncodeBuckets b;
  b.sizes = {{32, 32}};
  b.frames = {5};
  wt::media::FrameSelection selection;
  selection.fps = 16;
  const std::vector<wt::wan::ItemProbe> probes{video(80, 48, 9), still(48, 32), video(40, 40, 5)};
  const auto plan = wt::wan::plan_encode(probes, b, selection, 16);
  EXPECT_EQ(items_of(plan), (std::vector<std::vector<size_t>>{{0, 2}}));
  EXPECT_EQ(plan.shards[0].bucket, (wt::wan::ClipBucket{5, {32, 32}}));
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].second, "too few frames: 1 at 16 fps, --frames 5 needs 5");
  b.frames = {1};
  EXPECT_EQ(items_of(wt::wan::plan_encode(probes, b, selection, 16)), (std::vector<std::vector<size_t>>{{0, 1, 2}}));
}

TEST(EncodePlan, WithoutUpscalingSmallItemsGetBucketsOfTheirOwn) {
  wt::wan::EncodeBuckets b;
  b.sizes = {{64, 32}, {32, 64}};
  b.frames = {1};
  b.bucketed = true;
  b.no_upscale = true;
  // 50x20 -> nearest 64x32, smaller: its own 48x16; 200x100 covers 64x32;
  // 10x10 has no bucket without enlarging.
  const auto plan = wt::wan::plan_encode({still(50, 20), still(200, 100), still(10, 10)}, b, {}, 16);
  ASSERT_EQ(plan.shards.size(), 2u);
  EXPECT_EQ(plan.shards[0].bucket, (wt::wan::ClipBucket{1, {48, 16}}));
  EXPECT_EQ(plan.shards[1].bucket, (wt::wan::ClipBucket{1, {64, 32}}));
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].first, 2u);
  EXPECT_NE(plan.skipped[0].second.find("too small for a bucket of its own"), std::string::npos);
}

TEST(EncodePlan, BadBucketSettingsNameTheSetting) {
  auto error_of = [](const wt::wan::EncodeBuckets& b) {
    try {
      wt::wan::check_buckets(b);
    } catch (const wt::SettingError& e) {
      return e.setting() + ": " + e.message();
    }
    return std::string("(none)");
  };
  wt::wan::EncodeBuckets b;
  EXPECT_EQ(error_of(b), "(none)");
  b.sizes = {{64, 32}, {40, 32}};
  EXPECT_NE(error_of(b).find("sizes: 40x32: width and height must be multiples of 16"), std::string::npos);
  b.sizes = {{64, 32}};
  b.frames = {1, 16};
  EXPECT_NE(error_of(b).find("frames: 16: Wan needs 4k + 1 frames"), std::string::npos);
  b.frames = {9, 5};
  EXPECT_NE(error_of(b).find("frames: 9,5: the lengths must ascend"), std::string::npos);
}

// Wan2.2's VAE compresses 16x: with the 2x2 patches, sides and bucket steps
// are multiples of 32 (832x480 is; 848x480 and a step of 16 are not).
TEST(EncodePlan, TheWan22VaeTakesSidesInMultiplesOf32) {
  auto error_of = [](const wt::wan::EncodeBuckets& b) {
    try {
      wt::wan::check_buckets(b, 32);
    } catch (const wt::SettingError& e) {
      return e.setting() + ": " + e.message();
    }
    return std::string("(none)");
  };
  wt::wan::EncodeBuckets b;
  b.sizes = {{832, 480}};
  b.step = 32;
  EXPECT_EQ(error_of(b), "(none)");
  b.sizes = {{848, 480}};
  EXPECT_EQ(error_of(b),
            "sizes: 848x480: width and height must be multiples of 32 (the VAE's 16, then the DiT's 2x2 "
            "patches)");
  b.sizes = {{832, 480}};
  b.step = 16;
  EXPECT_EQ(error_of(b), "step: 16: must be a multiple of 32 (the VAE's 16, then the DiT's 2x2 patches)");
}
