// Latents to a video a person can watch: the VAE decodes them chunk by
// chunk, and each chunk's frames go straight to a video file and/or PNG
// frames, so memory does not grow with the video's length.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "wantrain/media/video_writer.hpp"
#include "wantrain/wan/vae/video_vae.hpp"

namespace wt::wan {

struct VideoOutput {
  std::string video;       // a video file (container by extension); empty: none
  std::string frames_dir;  // PNG frames frame-00000.png ... (created); empty: none
  media::VideoWriterOptions writer;
  std::function<void(const media::Image& frame)> on_frame;  // also sees each frame (optional)
};

// latents [z, F, h, w] (normalised) -> the frames written; returns their
// number. UsageError naming the file or folder that cannot be written.
int64_t write_decoded_video(VideoVae& vae, const at::Tensor& latents, const VideoOutput& output);

}  // namespace wt::wan
