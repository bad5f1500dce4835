// Frames out to a video file over FFmpeg: the container follows the file's
// extension (.mp4, .mkv, .webm, .mov, .gif...) and the codec is the
// container's default (H.264 by libx264 in .mp4 and .mkv, VP9 in .webm,
// GIF in .gif) unless named. The file appears only when finish() succeeds:
// frames go to NAME.partial, renamed at the end, so a failed or
// interrupted write never leaves a truncated video under the name asked for.
#pragma once

#include <memory>
#include <string>

#include "wantrain/media/image.hpp"

namespace wt::media {

struct VideoWriterOptions {
  double fps = 16;    // Wan's frame rate
  int quality = 18;   // x264/VP9 CRF: 0 lossless, 18 visually lossless, 51 worst
  std::string codec;  // FFmpeg encoder name; empty: the container's default
};

class VideoWriter {
 public:
  // UsageError naming the file for an unknown extension, a codec FFmpeg
  // lacks, or a size the codec cannot take (H.264 in 4:2:0 needs even sizes).
  VideoWriter(const std::string& path, int width, int height, const VideoWriterOptions& options = {});
  ~VideoWriter();  // without finish(): the partial file is removed
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  void write(const Image& rgb);  // width x height, 3 channels
  void finish();                 // flushes, writes the trailer, renames into place
  int64_t frames() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Frames to PNG files through FFmpeg's PNG encoder: RGB or greyscale.
std::string encode_png(const Image& image);
void write_png(const std::string& path, const Image& image);  // atomically: NAME.partial, renamed

}  // namespace wt::media
