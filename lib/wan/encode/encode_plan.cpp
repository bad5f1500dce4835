#include "wantrain/wan/encode/encode_plan.hpp"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "wantrain/util/error.hpp"

namespace wt::wan {
namespace {

std::string rate_text(double fps) { return fps > 0 ? fmt::format("{:g} fps", fps) : "its own rate"; }

// The picture size of an item: the one size, or the nearest bucket (then,
// without enlarging, perhaps one of its own). {0, 0}: none.
media::FrameSize size_of(const ItemProbe& p, const EncodeBuckets& b) {
  if (b.sizes.size() == 1 && !b.no_upscale) return b.sizes.front();
  const auto nearest = media::nearest_bucket(p.width, p.height, b.sizes);
  return b.no_upscale ? media::no_upscale_bucket(p.width, p.height, nearest, b.step) : nearest;
}

}  // namespace

bool ClipBucket::operator<(const ClipBucket& o) const {
  return std::tie(frames, size.height, size.width) < std::tie(o.frames, o.size.height, o.size.width);
}
bool ClipBucket::operator==(const ClipBucket& o) const {
  return frames == o.frames && size.width == o.size.width && size.height == o.size.height;
}

int64_t PlannedShard::clips() const {
  int64_t n = 0;
  for (const auto& i : items) n += i.clips;
  return n;
}

std::string frames_text(const std::vector<int64_t>& frames) {
  std::string out;
  for (const int64_t n : frames) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

void check_buckets(const EncodeBuckets& b, int64_t multiple) {
  if (b.sizes.empty()) throw SettingError("sizes", "no picture size");
  for (const auto& s : b.sizes)
    if (s.width < multiple || s.height < multiple || s.width % multiple || s.height % multiple)
      throw SettingError("sizes", fmt::format("{}x{}: width and height must be multiples of {} (the VAE's {}, then "
                                              "the DiT's 2x2 patches)",
                                              s.width, s.height, multiple, multiple / 2));
  if (b.frames.empty()) throw SettingError("frames", "no clip length");
  for (size_t i = 0; i < b.frames.size(); ++i) {
    if (b.frames[i] < 1 || (b.frames[i] - 1) % 4)
      throw SettingError("frames", fmt::format("{}: Wan needs 4k + 1 frames (1, 5, 9, ... 81)", b.frames[i]));
    if (i > 0 && b.frames[i] <= b.frames[i - 1])
      throw SettingError("frames", fmt::format("{}: the lengths must ascend, each once", frames_text(b.frames)));
  }
  if (b.step < multiple || b.step % multiple)
    throw SettingError("step", fmt::format("{}: must be a multiple of {} (the VAE's {}, then the DiT's 2x2 patches)",
                                           b.step, multiple, multiple / 2));
}

EncodePlan plan_encode(const std::vector<ItemProbe>& probes, const EncodeBuckets& b,
                       const media::FrameSelection& selection, int64_t items_per_shard) {
  EncodePlan plan;
  std::map<ClipBucket, std::vector<PlannedItem>> buckets;
  for (size_t i = 0; i < probes.size(); ++i) {
    const ItemProbe& p = probes[i];
    if (!p.problem.empty()) {
      plan.skipped.emplace_back(i, p.problem);
      continue;
    }
    const auto size = size_of(p, b);
    if (size.width == 0) {
      plan.skipped.emplace_back(
          i, fmt::format("{}x{} is too small for a bucket of its own without enlarging it (a side under {} pixels; "
                         "--bucket-no-upscale)",
                         p.width, p.height, b.step));
      continue;
    }
    const auto lengths =
        p.still && b.bucketed ? std::vector<int64_t>{1} : media::filled_lengths(p.frames, b.frames, b.choice);
    if (lengths.empty()) {
      plan.skipped.emplace_back(
          i, b.frames.size() == 1 ? fmt::format("too few frames: {} at {}, --frames {} needs {}", p.frames,
                                                rate_text(selection.fps), b.frames[0], b.frames[0])
                                  : fmt::format("too few frames: {} at {}, --frames {} needs at least {}", p.frames,
                                                rate_text(selection.fps), frames_text(b.frames), b.frames[0]));
      continue;
    }
    for (const int64_t n : lengths) {
      media::FrameSelection s = selection;
      s.frames = n;
      const auto clips = int64_t(media::clip_starts(p.frames, s).size());
      if (clips > 0) buckets[ClipBucket{n, size}].push_back({i, clips});
    }
  }
  for (const auto& [bucket, items] : buckets)
    for (size_t first = 0; first < items.size(); first += size_t(items_per_shard)) {
      const size_t end = std::min(items.size(), first + size_t(items_per_shard));
      plan.shards.push_back({bucket, std::vector<PlannedItem>(items.begin() + long(first), items.begin() + long(end))});
    }
  return plan;
}

}  // namespace wt::wan
