// Which samples `wandata encode` makes of a listing, and in which shards:
// each item's buckets (picture size and clip lengths) from what its header
// says, then the items grouped by bucket and cut into shards. A pure
// function of the probes and the settings: every rank computes the same
// plan, for any number of ranks, and a resumed job the first run's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "wantrain/media/buckets.hpp"
#include "wantrain/media/frame_selection.hpp"
#include "wantrain/media/media_reader.hpp"

namespace wt::wan {

// What an item's header and caption say, or why it is skipped.
struct ItemProbe {
  std::string problem;  // non-empty: the item is skipped, and why
  int width = 0, height = 0;
  bool still = false;  // an image: one frame
  int64_t frames = 0;  // after resampling to the frame rate
};

// One shape of sample: clip length and picture size.
struct ClipBucket {
  int64_t frames = 1;
  media::FrameSize size;
  // The shards' order: by frames, then height, then width.
  bool operator<(const ClipBucket& other) const;
  bool operator==(const ClipBucket& other) const;
};

// The sizes and lengths an encode makes.
struct EncodeBuckets {
  // One size: every item is scaled to cover it and centre-cropped. Several:
  // each item goes to the one nearest its aspect ratio.
  std::vector<media::FrameSize> sizes{{832, 480}};
  std::vector<int64_t> frames{81};  // clip lengths, 4k + 1, ascending
  media::FrameBucketChoice choice = media::FrameBucketChoice::Longest;
  // Whether the dataset may hold several shapes. Then a still is a 1-frame
  // sample whatever `frames` holds; otherwise (one size and one length,
  // the fixed shape of unbucketed runs) a still is a video of one frame,
  // kept only when that length is 1.
  bool bucketed = false;
  // An item that would be enlarged to cover its bucket gets a bucket of its
  // own size instead (media::no_upscale_bucket), sides multiples of `step`.
  bool no_upscale = false;
  int step = 16;
};

// SettingError naming "sizes" (not multiples of `multiple`, none), "step"
// (likewise) or "frames" (not 4k + 1, not ascending and distinct, none).
// `multiple`: the VAE's spatial factor times the DiT's 2x2 patches, 16 for
// Wan2.1's VAE and 32 for Wan2.2's.
void check_buckets(const EncodeBuckets& buckets, int64_t multiple = 16);

struct PlannedItem {
  size_t item = 0;    // index in the listing
  int64_t clips = 0;  // samples it gives in this bucket
};
struct PlannedShard {
  ClipBucket bucket;
  std::vector<PlannedItem> items;  // in listing order
  int64_t clips() const;
};
struct EncodePlan {
  // Shard k is shards[k]: the buckets in ClipBucket order, each bucket's
  // items in listing order, cut every `items_per_shard` items.
  std::vector<PlannedShard> shards;
  std::vector<std::pair<size_t, std::string>> skipped;  // (item, why), in listing order
};

// `selection` gives the frame rate and the extraction; its `frames` is set
// to each length in turn.
EncodePlan plan_encode(const std::vector<ItemProbe>& probes, const EncodeBuckets& buckets,
                       const media::FrameSelection& selection, int64_t items_per_shard);

// The text of a frames list as the option takes it: "81", "1,17,33".
std::string frames_text(const std::vector<int64_t>& frames);

}  // namespace wt::wan
