#include "wantrain/media/buckets.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace wt::media {
namespace {

__extension__ typedef unsigned __int128 Wide;  // products of two products of sides

// How far bucket b's aspect ratio is from width:height, as the fraction
// (num / den >= 1) whose log is that distance: w*bh against h*bw.
std::pair<uint64_t, uint64_t> aspect_distance(int width, int height, FrameSize b) {
  const uint64_t p = uint64_t(width) * uint64_t(b.height), q = uint64_t(height) * uint64_t(b.width);
  return {std::max(p, q), std::min(p, q)};
}

}  // namespace

std::vector<FrameSize> auto_resolution_buckets(int64_t area, int step, double max_aspect) {
  std::vector<FrameSize> out;
  if (step < 1 || area < int64_t(step) * step) return out;
  // Past sqrt(max_aspect * area) every width is too wide for its height.
  const auto widest = int64_t(std::sqrt(max_aspect * double(area))) + step;
  for (int64_t w = step; w * step <= area && w <= widest; w += step) {
    const int64_t h = area / w / step * step;  // the tallest that fits beside w
    if ((w + step) * h <= area) continue;      // a wider one fits at this height: not maximal
    if (double(w) > max_aspect * double(h) || double(h) > max_aspect * double(w)) continue;
    out.push_back({int(w), int(h)});
  }
  std::sort(out.begin(), out.end(),
            [](FrameSize a, FrameSize b) { return std::pair(a.height, a.width) < std::pair(b.height, b.width); });
  return out;
}

FrameSize nearest_bucket(int width, int height, const std::vector<FrameSize>& buckets) {
  FrameSize best = buckets.front();
  auto best_distance = aspect_distance(width, height, best);
  for (const FrameSize b : buckets) {
    const auto d = aspect_distance(width, height, b);
    // d < best  <=>  d.num / d.den < best.num / best.den, in exact integers.
    const Wide left = Wide(d.first) * best_distance.second, right = Wide(best_distance.first) * d.second;
    const int64_t area = int64_t(b.width) * b.height, best_area = int64_t(best.width) * best.height;
    const bool better =
        left < right || (left == right && (area > best_area || (area == best_area && b.width > best.width)));
    if (better) best = b, best_distance = d;
  }
  return best;
}

FrameSize no_upscale_bucket(int width, int height, FrameSize bucket, int step) {
  if (width >= bucket.width && height >= bucket.height) return bucket;
  const int64_t area = int64_t(bucket.width) * bucket.height, own = int64_t(width) * height;
  int64_t w = width / step * step, h = height / step * step;
  if (own > area) {
    // Scaled down to the bucket's area; rounding down keeps it within.
    const double scale = std::sqrt(double(area) / double(own));
    w = int64_t(std::floor(width * scale / step)) * step;
    h = int64_t(std::floor(height * scale / step)) * step;
    while (w * h > area) (w >= h ? w : h) -= step;  // floating point's last bit
  }
  if (w < step || h < step) return {0, 0};
  return {int(w), int(h)};
}

std::vector<int64_t> filled_lengths(int64_t available, const std::vector<int64_t>& lengths, FrameBucketChoice choice) {
  std::vector<int64_t> out;
  for (const int64_t n : lengths)
    if (n <= available) out.push_back(n);
  if (choice == FrameBucketChoice::Longest && out.size() > 1) out.erase(out.begin(), out.end() - 1);
  return out;
}

}  // namespace wt::media
