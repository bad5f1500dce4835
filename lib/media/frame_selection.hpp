// Which frames of a video make the training clips: the frame rate first
// (resampled by timestamps), then windows of N frames, as musubi-tuner's
// dataset options name them:
//   head     the first N frames (one clip);
//   slide    a clip starting every `stride` frames while N frames remain;
//   uniform  `samples` clips with starts spread evenly from the first frame
//            to the last start that leaves N frames (the starts floored;
//            a start that repeats is taken once, so a still or a video of
//            barely N frames gives one clip, not copies of it).
// Pure arithmetic on the frames' presentation times, so it is tested alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wt::media {

enum class FrameExtraction { Head, Slide, Uniform };

FrameExtraction parse_frame_extraction(const std::string& name);  // UsageError naming the option otherwise
const char* frame_extraction_name(FrameExtraction e);

struct FrameSelection {
  int64_t frames = 1;  // N per clip (Wan: 4k + 1)
  double fps = 0;      // 0: every source frame; else resample to this rate
  FrameExtraction extraction = FrameExtraction::Head;
  int64_t stride = 1;   // slide
  int64_t samples = 1;  // uniform
};

// The source frame of each frame at `fps`: for output time t0 + i / fps,
// the last source frame shown at that time (frames repeat when upsampling
// and are skipped when downsampling). `times` are presentation times in
// seconds, ascending. fps 0 keeps every frame.
std::vector<int64_t> resample_frames(const std::vector<double>& times, double fps);

// Where the clips start among `available` frames (after resampling), as
// `selection` picks them; empty when fewer than N. The count alone decides
// a video's buckets before it is decoded.
std::vector<int64_t> clip_starts(int64_t available, const FrameSelection& selection);

// The clips: each a list of source frame indices (into `times`). Empty
// when the video has fewer frames than N after resampling.
std::vector<std::vector<int64_t>> select_clips(const std::vector<double>& times, const FrameSelection& selection);

}  // namespace wt::media
