#include "wantrain/wan/sample/video_output.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/vae/video_frames.hpp"

namespace wt::wan {

int64_t write_decoded_video(VideoVae& vae, const at::Tensor& latents, const VideoOutput& output) {
  if (latents.dim() != 4) throw Error("write_decoded_video: latents must be [z, F, h, w]");
  const int64_t f = vae.spatial_factor();
  const int width = int(latents.size(3) * f), height = int(latents.size(2) * f);
  if (!output.frames_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(output.frames_dir, ec);
    if (ec) throw UsageError(fmt::format("{}: cannot be created: {}", output.frames_dir, ec.message()));
  }
  std::unique_ptr<media::VideoWriter> writer;
  if (!output.video.empty()) writer = std::make_unique<media::VideoWriter>(output.video, width, height, output.writer);
  int64_t written = 0;
  const auto weights = vae.parameters().front();
  torch::NoGradGuard no_grad;
  vae.decode(latents.unsqueeze(0).to(weights.device(), torch::kFloat32), [&](const at::Tensor& chunk) {
    for (auto& frame : video_to_frames(chunk[0])) {  // [3, n, H, W] -> n RGB frames
      if (writer) writer->write(frame);
      if (output.on_frame) output.on_frame(frame);
      if (!output.frames_dir.empty())
        media::write_png(fmt::format("{}/frame-{:05d}.png", output.frames_dir, written), frame);
      ++written;
    }
  });
  if (writer) writer->finish();
  return written;
}

}  // namespace wt::wan
