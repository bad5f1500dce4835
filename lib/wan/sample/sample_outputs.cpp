#include "wantrain/wan/sample/sample_outputs.hpp"

#include <algorithm>
#include <utility>

#include "wantrain/media/video_writer.hpp"
#include "wantrain/util/files.hpp"

namespace wt::wan {
namespace {

constexpr int kStripFrames = 6;    // frames a TensorBoard strip shows
constexpr int kStripHeight = 160;  // at most, in pixels
constexpr int kStripGap = 4;       // black pixels between frames

// Frames chosen evenly over the video (the first and the last among them),
// shrunk by a whole factor to at most kStripHeight, side by side.
class FrameStrip {
 public:
  explicit FrameStrip(int64_t frames) {
    const int64_t shown = std::min<int64_t>(kStripFrames, frames);
    for (int64_t k = 0; k < shown; ++k)
      chosen_.push_back(shown == 1 ? 0 : (k * (frames - 1) + (shown - 1) / 2) / (shown - 1));
  }
  void add(const media::Image& frame) {
    if (std::find(chosen_.begin(), chosen_.end(), seen_++) == chosen_.end()) return;
    const int step = (frame.height + kStripHeight - 1) / kStripHeight;
    media::Image small(frame.width / step, frame.height / step, 3);
    for (int y = 0; y < small.height; ++y)
      for (int x = 0; x < small.width; ++x)
        std::copy_n(frame.row(y * step) + size_t(x * step) * 3, 3, small.row(y) + size_t(x) * 3);
    frames_.push_back(std::move(small));
  }
  report::Image image() const {
    if (frames_.empty()) return {};
    const int w = frames_[0].width, h = frames_[0].height, n = int(frames_.size());
    media::Image strip(n * w + (n - 1) * kStripGap, h, 3);
    for (int i = 0; i < n; ++i)
      for (int y = 0; y < h; ++y)
        std::copy_n(frames_[i].row(y), size_t(w) * 3, strip.row(y) + size_t(i) * (w + kStripGap) * 3);
    return {strip.width, strip.height, 3, media::encode_png(strip)};
  }

 private:
  std::vector<int64_t> chosen_;
  int64_t seen_ = 0;
  std::vector<media::Image> frames_;
};

}  // namespace

void PreviewPng::write(const DrawnSample& sample) {
  std::vector<at::Tensor> videos{sample.latents};
  if (sample.reference.defined()) videos.push_back(sample.reference);
  preview_ = latent_preview(videos);
  if (!path_.empty()) write_file_durably(path_, preview_.png());
}

report::Image PreviewPng::image() const { return {preview_.width, preview_.height, 1, preview_.png()}; }

void DecodedVideo::write(const DrawnSample& sample) {
  FrameStrip strip(1 + (sample.latents.size(1) - 1) * vae_.temporal_factor());
  VideoOutput output = output_;
  output.on_frame = [&](const media::Image& frame) {
    strip.add(frame);
    if (output_.on_frame) output_.on_frame(frame);
  };
  frames_ = 0;
  try {
    frames_ = write_decoded_video(vae_, sample.latents, output);
  } catch (...) {
    strip_ = strip.image();  // the frames decoded before the failure
    throw;
  }
  strip_ = strip.image();
}

}  // namespace wt::wan
