// Videos and images in, over FFmpeg's libraries (any container and codec
// FFmpeg 5.1 reads: mp4, mkv, webm, mov, avi, gif; png, jpg, webp...):
// a probe that reads the header and every packet's timestamp without
// decoding, then decoding of chosen frames to RGB, each resized to cover a
// size and centre-cropped as it is decoded, so only the frames asked for are
// ever held, at the size asked for.
//
// Files are untrusted. The limits are checked before anything is allocated
// for a picture: a header's size against max_pixels (FFmpeg's decoders
// check the same bound before they allocate a frame), the number of frames
// against max_frames while they are counted. Every failure is a UsageError
// of one line that names the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wantrain/media/image.hpp"

namespace wt::media {

struct MediaLimits {
  int64_t max_pixels = int64_t(8192) * 8192;  // per picture: 8K square
  int64_t max_frames = 100000;                // per video
};

struct MediaInfo {
  std::string path, format, codec;  // format: FFmpeg's demuxer name; codec: its decoder
  int width = 0, height = 0;
  bool still = false;         // an image format: one frame
  std::vector<double> times;  // presentation time of each frame, seconds, ascending
  int64_t frames() const { return int64_t(times.size()); }
  double fps() const;  // frames over the span between the first and last; 0 for one frame
};

MediaInfo probe_media(const std::string& path, const MediaLimits& limits = {});

// The size frames are made at: each frame is scaled (keeping its aspect
// ratio) to the smallest size covering width x height, then cut to it
// around the centre. The filter is swscale's area averaging (SWS_AREA):
// each output pixel averages the source pixels it covers, so a downscale
// does not alias; upscaling interpolates bilinearly. 0 x 0: source size.
struct FrameSize {
  int width = 0, height = 0;
};

struct DecodeOptions {
  FrameSize size;
  MediaLimits limits;
  int threads = 1;  // decoder threads (frame threads only: slice threads can deadlock some HEVC streams)
};

// Decodes frames `indices` (positions in the probe's `times`, ascending,
// repeats allowed) and hands each to `each(k, image)`, k its position in
// `indices`, in order. UsageError naming the file when the stream ends
// before the last index or a frame cannot be decoded.
void decode_frames(const std::string& path, const std::vector<int64_t>& indices, const DecodeOptions& options,
                   const std::function<void(size_t k, Image&& frame)>& each);

// Scales an RGB image as FrameSize says (cover, centre crop, area filter).
Image resize_cover(const Image& image, FrameSize size);

}  // namespace wt::media
