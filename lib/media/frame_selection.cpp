#include "wantrain/media/frame_selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "wantrain/util/error.hpp"

namespace wt::media {

FrameExtraction parse_frame_extraction(const std::string& name) {
  if (name == "head") return FrameExtraction::Head;
  if (name == "slide") return FrameExtraction::Slide;
  if (name == "uniform") return FrameExtraction::Uniform;
  throw UsageError(fmt::format("--frame-extraction: '{}' is none of head, slide, uniform", name));
}

const char* frame_extraction_name(FrameExtraction e) {
  switch (e) {
    case FrameExtraction::Head: return "head";
    case FrameExtraction::Slide: return "slide";
    case FrameExtraction::Uniform: return "uniform";
  }
  return "?";
}

std::vector<int64_t> resample_frames(const std::vector<double>& times, double fps) {
  std::vector<int64_t> out;
  if (times.empty()) return out;
  if (fps <= 0) {
    out.resize(times.size());
    for (size_t i = 0; i < times.size(); ++i) out[i] = int64_t(i);
    return out;
  }
  // A tolerance of a thousandth of an output frame absorbs timestamp
  // rounding (a 30 fps stream in a 1/90000 time base).
  const double tolerance = 1e-3 / fps;
  const double start = times.front(), last = times.back();
  for (int64_t i = 0;; ++i) {
    const double t = start + double(i) / fps;
    if (t > last + tolerance) break;
    const auto shown = std::upper_bound(times.begin(), times.end(), t + tolerance) - times.begin() - 1;
    out.push_back(std::max<int64_t>(0, shown));
  }
  return out;
}

std::vector<int64_t> clip_starts(int64_t available, const FrameSelection& s) {
  const int64_t n = s.frames;
  std::vector<int64_t> starts;
  if (n < 1 || available < n) return starts;
  switch (s.extraction) {
    case FrameExtraction::Head: starts.push_back(0); break;
    case FrameExtraction::Slide:
      for (int64_t start = 0; start + n <= available; start += std::max<int64_t>(1, s.stride)) starts.push_back(start);
      break;
    case FrameExtraction::Uniform: {
      const int64_t k = std::max<int64_t>(1, s.samples), last = available - n;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t start = k == 1 ? 0 : int64_t(std::floor(double(last) * double(j) / double(k - 1)));
        // Fewer frames than clips asked for (a still, a video just long
        // enough): each start once, not the same clip several times.
        if (starts.empty() || start != starts.back()) starts.push_back(start);
      }
      break;
    }
  }
  return starts;
}

std::vector<std::vector<int64_t>> select_clips(const std::vector<double>& times, const FrameSelection& s) {
  const auto frames = resample_frames(times, s.fps);
  std::vector<std::vector<int64_t>> clips;
  for (const int64_t start : clip_starts(int64_t(frames.size()), s))
    clips.emplace_back(frames.begin() + start, frames.begin() + start + s.frames);
  return clips;
}

}  // namespace wt::media
