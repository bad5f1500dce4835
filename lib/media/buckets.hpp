// Resolution and frame-length buckets: the sizes and clip lengths that media
// of mixed aspect ratios and lengths are made at, so that each sample keeps
// most of its picture and a batch still holds samples of one shape (how
// musubi-tuner and DiffSynth-Studio train on mixed data). Pure arithmetic on
// sizes and counts, tested alone.
#pragma once

#include <cstdint>
#include <vector>

#include "wantrain/media/media_reader.hpp"

namespace wt::media {

// The buckets of a pixel budget: every width x height whose sides are
// multiples of `step`, whose area is at most `area`, and that is maximal (no
// side can grow by a step within the area), with aspect ratios from
// 1:max_aspect to max_aspect:1. As musubi-tuner's BucketSelector: for each
// width, the largest height that fits. Sorted by (height, width). Empty when
// not even step x step fits.
std::vector<FrameSize> auto_resolution_buckets(int64_t area, int step, double max_aspect = 4);

// The bucket whose aspect ratio is nearest width:height, by the distance of
// log aspect ratios (2:1 and 1:2 are equally far from 1:1), computed
// exactly in integers. A tie goes to the larger area, then the larger width,
// so the choice does not depend on the list's order. `buckets` non-empty.
FrameSize nearest_bucket(int width, int height, const std::vector<FrameSize>& buckets);

// Where a width x height item goes when it must not be enlarged: `bucket`
// when the item covers it (both sides at least the bucket's), else a bucket
// of its own: its size, scaled down keeping its aspect ratio to at most the
// bucket's area when larger, each side rounded down to a multiple of `step`.
// Frames scaled to cover that and centre-cropped are never enlarged. {0, 0}
// when a side would be under one step.
FrameSize no_upscale_bucket(int width, int height, FrameSize bucket, int step);

// Which of the clip lengths `lengths` (ascending) a video of `available`
// frames gives clips at: the longest it fills, or every length it fills.
enum class FrameBucketChoice { Longest, All };
std::vector<int64_t> filled_lengths(int64_t available, const std::vector<int64_t>& lengths, FrameBucketChoice choice);

}  // namespace wt::media
